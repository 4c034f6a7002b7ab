"""A team's checks against outcomes, live: a check that failed a run is kept with its verdict
whole, and when the run's outcome comes, the check's rates on ok and failed runs and its
precision are counted like the rules', for /metrics, `tracejudge status` and the explorer."""

from __future__ import annotations

from prometheus_client.core import Metric

from tracejudge.judges.agreement.tally import Kept, Tally, Truth, View, cells
from tracejudge.streams.agreement.live import check_figures, families
from tracejudge.streams.agreement.report import agreement_json, agreement_lines

LONG = "check:team_policies.refunds:refund_within_the_order_total"  # past the 48 kept by name
SHORT = "check:needs_confirmation"


def kept(*findings: str, agent: str = "support-bot") -> Kept:
    return Kept(agent, None, 60, View(80, False, False), findings=findings)


def tally_of(runs: list[tuple[Kept, bool]]) -> Tally:
    tally = Tally()
    for k, ok in runs:
        # each verdict as the store keeps it and reads it back when its outcome comes
        tally.add(cells(Kept.decode(k.encode()), Truth(ok, "test")))
    return tally


RUNS = [
    (kept(LONG, "unrecovered_failure", "some_rule_with_a_long_name_" * 3), False),
    (kept(LONG, SHORT), False),
    (kept(SHORT), True),
    (kept(), True),
    (kept(), True),
    (kept(), False),
    (kept(LONG, agent="coder"), True),
]


def test_a_check_kept_with_its_verdict_is_read_back_whole() -> None:
    k = kept(LONG, "unrecovered_failure", "some_rule_with_a_long_name_" * 3)
    back = Kept.decode(k.encode())
    assert LONG in back.findings and "unrecovered_failure" in back.findings
    assert len(k.encode()) < 200  # a few checks a run: still a small record


def test_each_check_is_counted_against_the_outcomes_of_its_agents_runs() -> None:
    rates = {r.rule: r for r in tally_of(RUNS).check_rates("support-bot")}
    assert set(rates) == {LONG, SHORT}
    long, short = rates[LONG], rates[SHORT]
    # support-bot: 3 ok runs, 3 failed; LONG failed 2 failed runs, SHORT 1 of each
    assert (long.on_ok.hits, long.on_ok.count, long.on_failed.hits, long.on_failed.count) == (
        0, 3, 2, 3,
    )  # fmt: skip
    assert (short.on_ok.hits, short.on_failed.hits, short.precision.value) == (1, 1, 0.5)
    assert long.precision.value == 1.0
    every = {r.rule: r for r in tally_of(RUNS).check_rates()}
    assert (every[LONG].on_ok.hits, every[LONG].on_ok.count) == (1, 4)  # coder's run too


def samples(made: list[Metric], name: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["agent"], s.labels["check"]): s.value
        for family in made
        for s in family.samples
        if s.name == name
    }


def test_metrics_status_and_replay_show_each_check() -> None:
    tally = tally_of(RUNS)
    made = families({}, check_figures(tally))
    assert samples(made, "tracejudge_agreement_check_precision") == {
        ("support-bot", LONG): 1.0,
        ("support-bot", SHORT): 0.5,
        ("coder", LONG): 0.0,
    }
    assert samples(made, "tracejudge_agreement_check_fired")[("support-bot", LONG)] == 2
    lines = agreement_lines(agreement_json(tally))
    assert any(
        line.strip().startswith(f"{SHORT}: failed 33% (1/3) of ok runs, 33% (1/3) of failed")
        for line in lines
    ), lines
