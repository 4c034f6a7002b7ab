"""When a failure mode is announced: new at its fifth run within a window, a jump against its
own past, once per window, quiet after a window without it."""

from __future__ import annotations

from tracejudge.judges.modes.watch import ModeWatch


def test_a_new_mode_is_announced_at_its_fifth_run_once_and_quiet_after_a_window() -> None:
    watch = ModeWatch(window_s=600, history_s=3600, min_runs=5)
    said = [watch.observe("shop", "m1", "refund fails", 1000.0 + 10 * n, f"r{n}", "v2")
            for n in range(8)]  # fmt: skip
    assert [a is not None for a in said] == [False] * 4 + [True] + [False] * 3
    first = said[4]
    assert first is not None and (first.kind, first.runs, first.versions) == ("new", 5, ("v2",))
    assert first.examples == ("r0", "r1", "r2", "r3", "r4")
    assert watch.tick(1000.0 + 300) == []  # still failing within the window
    (quiet,) = watch.tick(1000.0 + 70 + 700)
    assert quiet.kind == "quiet" and quiet.key == "m1"
    assert watch.tick(1000.0 + 70 + 800) == []  # once


def test_a_steady_mode_is_not_announced_until_its_rate_jumps() -> None:
    watch = ModeWatch(window_s=600, history_s=3600, min_runs=5, jump=3.0)
    steady = [watch.observe("shop", "m2", "lookup times out", n * 120.0, f"s{n}")
              for n in range(30)]  # fmt: skip
    # one run every two minutes for an hour: announced once, when it first reached five
    assert [(n, a.kind) for n, a in enumerate(steady) if a is not None] == [(4, "new")]
    burst = [watch.observe("shop", "m2", "lookup times out", 3600 + k, f"j{k}")
             for k in range(20)]  # fmt: skip
    assert [a.kind for a in burst if a is not None] == ["jump"]


def test_modes_are_per_agent() -> None:
    watch = ModeWatch(min_runs=2)
    watch.observe("a", "m", "x", 0.0, "r1")
    assert watch.observe("b", "m", "x", 1.0, "r2") is None
    said = watch.observe("a", "m", "x", 2.0, "r3")
    assert said is not None and said.agent == "a"
