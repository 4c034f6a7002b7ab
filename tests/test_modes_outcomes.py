"""Outcomes per failure mode: a verdict's mode is kept with it, and when the run's outcome
comes, the share of the mode's runs that truly failed is counted, so a mode that is mostly
false alarms shows as such (the explorer's modes page reads it)."""

from __future__ import annotations

from tracejudge.judges.agreement.tally import Kept, Tally, Truth, View, cells


def kept(mode: str | None, steered: tuple[str, ...] = ()) -> Kept:
    return Kept("shop", "v2", 60, View(40, True, True), steered=steered, mode=mode)


def test_a_verdicts_mode_is_kept_and_its_runs_truly_failed_are_counted_per_mode() -> None:
    tally = Tally()
    runs = [(kept("m503"), False)] * 6 + [(kept("m503"), True)] * 2
    runs += [(kept("noyes", steered=("repeat",)), True)] * 3 + [(kept(None), True)]
    for k, ok in runs:
        back = Kept.decode(k.encode())  # as the store keeps it and reads it back
        assert back.mode == k.mode and back.steered == k.steered
        tally.add(cells(back, Truth(ok, "support-desk")))
    rates = tally.mode_rates()
    assert (rates["m503"].hits, rates["m503"].count) == (6, 8)
    assert (rates["noyes"].hits, rates["noyes"].count) == (0, 3)  # all false alarms
    assert set(rates) == {"m503", "noyes"} and tally.mode_rates("other-agent") == {}
    # the agent's figures are the rules' as before: a mode's cell is in none of them
    assert sum(n for c, n in tally.counts.items() if c.view == "rules") == len(runs)


def test_a_record_kept_by_an_older_worker_reads_without_a_mode() -> None:
    old = kept(None).encode()
    assert Kept.decode(old).mode is None and len(kept("m").encode()) < len(old) + 12
