"""When a failure mode is announced: new at its fifth run within a window, a jump of its share
against its own past (a surge of traffic alone is none), once per window, quiet after a window
without it, nothing while an agent is first watched; its state survives a round trip."""

from __future__ import annotations

from collections import Counter

from tracejudge.judges.modes.watch import AgentModes, ModeTimes
from tracejudge.models.modes import FailureMode, ModeAlert, ModeRun

TIMES = ModeTimes(window_s=600, history_s=3600, min_runs=5, jump=3.0, learn_s=600)


def _mode(key: str, after: str | None = None) -> FailureMode:
    return FailureMode(key=key, name=f"mode {key}", kind="rule", rule=key, after=after)


def _run(at: float, rid: str, key: str | None, version: str | None = "v1") -> ModeRun:
    mode = None if key is None else _mode(key)
    return ModeRun(agent_name="shop", agent_version=version, request_id=rid, at=at, mode=mode)


def _watched(until: float, every: float = 10.0) -> AgentModes:
    """An agent watched from 0 to `until`: one clean verdict every `every` seconds, and a run
    of mode "steady" every five minutes (one verdict in 30)."""
    agent = AgentModes(agent_name="shop", since=0.0)
    t = 0.0
    while t < until:
        key = "steady" if t % 300 == 0 else None
        assert agent.observe(_run(t, f"c{t}", key), TIMES) is None
        t += every
    return agent


def test_a_new_mode_is_announced_at_its_fifth_run_once_and_quiet_after_a_window() -> None:
    agent = _watched(1800)
    said = [agent.observe(_run(1800 + 10 * n, f"r{n}", "m1", "v2"), TIMES) for n in range(8)]
    assert [a is not None for a in said] == [False] * 4 + [True] + [False] * 3
    first = said[4]
    assert first is not None and (first.kind, first.runs, first.versions) == ("new", 5, {"v2": 5})
    assert first.examples == ["r0", "r1", "r2", "r3", "r4"]
    assert first.new_in_version == "v2"  # all of it in a version the agent had not run before
    assert "new failure mode since version v2, 5 runs in 10 min: mode m1" in first.message
    assert agent.tick(1800 + 300, TIMES) == []  # still failing within the window
    (quiet,) = agent.tick(1800 + 70 + 700, TIMES)
    assert quiet.kind == "quiet" and quiet.mode.key == "m1"
    assert agent.tick(1800 + 70 + 800, TIMES) == []  # once
    again = AgentModes.model_validate_json(agent.model_dump_json())  # a round trip as JSON
    assert again.model_dump() == agent.model_dump()


def test_nothing_is_announced_while_an_agent_is_first_watched() -> None:
    agent = AgentModes(agent_name="shop", since=0.0)
    assert [agent.observe(_run(10.0 * n, f"r{n}", "m"), TIMES) for n in range(20)] == [None] * 20


def test_a_steady_mode_is_not_announced_by_a_surge_of_traffic_but_by_a_jump_of_its_share() -> None:
    agent = _watched(3000)
    # five times the traffic, the steady mode at its share: nothing
    surge: list[ModeAlert | None] = []
    for n in range(300):
        t = 3000 + 2.0 * n
        surge.append(agent.observe(_run(t, f"s{n}", "steady" if n % 30 == 0 else None), TIMES))
    assert [a for a in surge if a is not None] == []
    # then its share jumps: one run in two
    jumped = [agent.observe(_run(3600 + 2.0 * n, f"j{n}", "steady" if n % 2 else None), TIMES)
              for n in range(100)]  # fmt: skip
    assert [a.kind for a in jumped if a is not None] == ["jump"]


def test_modes_are_per_agent_and_bounded() -> None:
    agent = AgentModes(agent_name="shop", since=0.0)
    small = ModeTimes(max_modes=3, learn_s=0)
    for n in range(10):
        agent.observe(_run(float(n), f"r{n}", f"m{n}"), small)
    assert sorted(agent.modes) == ["m7", "m8", "m9"]


def test_a_canary_version_that_fails_where_the_fleet_does_not_is_a_jump_within_it() -> None:
    agent = _watched(3000)  # v1: the mode in one verdict of 30
    said: list[ModeAlert | None] = []
    for n in range(200):  # then a v2 canary takes one verdict in ten, the mode in half of them
        t = 3000 + 3.0 * n
        canary = n % 10 == 0
        key = "steady" if (canary and n % 20 == 0) or (not canary and n % 30 == 1) else None
        said.append(agent.observe(_run(t, f"c{n}", key, "v2" if canary else "v1"), TIMES))
    (alert,) = [a for a in said if a is not None]
    assert (alert.kind, alert.version) == ("jump", "v2") and "in version v2" in alert.message


def _stream(agent: AgentModes, minutes: list[int], per_minute: int) -> list[str]:
    """`per_minute` verdicts a minute from minute 0; one run of mode "m" per entry of
    `minutes` (a minute listed twice has two). The kinds of what was announced."""
    said: list[str] = []
    runs = Counter(minutes)
    for minute in range(max(minutes) + 1):
        for n in range(per_minute):
            key = "m" if n < runs[minute] else None
            at = minute * 60.0 + n * 60.0 / per_minute
            alert = agent.observe(_run(at, f"r{minute}-{n}", key), TIMES)
            said += [alert.kind] if alert is not None else []
    return said


def test_a_burst_is_more_than_twice_the_most_a_mode_had_in_as_many_minutes() -> None:
    """A mode of about one run a minute, with 3 in the agent's first eleven: five runs in the
    last two and a half minutes are a Poisson tail under 1e-3 against that share (one benchmark
    order announced such a mode of a coding agent's unchanged traffic), but it had 4 in three
    minutes a little before. Five in two minutes of a mode that never had more than one in
    three are a burst."""
    usual = [4, 7, 10, 11, 12, 12, 13, 14, 16, 17, 19, 19, 19, 20, 20]
    assert _stream(AgentModes(agent_name="shop", since=0.0), usual, 22) == []
    burst = [4, 7, 19, 19, 19, 20, 20]
    assert _stream(AgentModes(agent_name="shop", since=0.0), burst, 22) == ["jump"]
