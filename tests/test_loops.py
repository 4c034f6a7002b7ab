"""The loop rules (judges/inflight/loops.py): each found on the call that completes its pattern, and
not on what agents do when they make progress."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tracejudge.judges.inflight.loops import LoopRules, LoopWatch

Call = tuple[str, str | None, bool, str | None]  # tool, arguments, success, result or error
DEFAULT = LoopRules()


def kinds(calls: Sequence[Call], rules: LoopRules = DEFAULT) -> list[tuple[str, int]]:
    watch = LoopWatch(rules)
    found: list[tuple[str, int]] = []
    for tool, args, ok, result in calls:
        found += [
            (f.kind, f.call) for f in watch.observe(tool, args, ok, result, None if ok else result)
        ]
    return found


def test_the_same_call_with_the_same_result_three_times_in_a_row() -> None:
    calls = [("search", "flights BOS", True, "3 flights")] * 3
    assert kinds(calls) == [("repeated_call", 3)]
    assert kinds(calls[:2]) == []


def test_scrolling_is_the_same_call_with_new_results_each_time() -> None:
    calls = [("scroll_down", None, True, f"lines {i * 100}-{i * 100 + 99}") for i in range(40)]
    assert kinds(calls) == []


def test_two_calls_taking_turns_three_times() -> None:
    a, b = (
        ("open", "Foo.java", True, "[File Foo.java]"),
        ("open", "Bar.java", True, "[File Bar.java]"),
    )
    assert ("alternating_calls", 6) in kinds([a, b, a, b, a, b])
    assert not any(k == "alternating_calls" for k, _ in kinds([a, b, a, b, a]))


def test_the_same_failure_three_times_even_with_other_work_between() -> None:
    fail = ("mvn", "test", False, "BUILD FAILURE: cannot find symbol LocalTime")
    work = [("edit", f"line {i}", True, f"edited {i}") for i in range(3)]
    found = kinds([fail, work[0], fail, work[1], fail, work[2]])
    assert found == [("repeated_failure", 5)]


def test_a_failure_then_fixed_is_how_agents_work() -> None:
    calls = [
        ("mvn", "test", False, "BUILD FAILURE: cannot find symbol"),
        ("edit", "add import", True, "edited"),
        ("mvn", "test", False, "BUILD FAILURE: 1 test failed"),
        ("edit", "fix assertion", True, "edited again"),
        ("mvn", "test", True, "BUILD SUCCESS"),
    ]
    assert kinds(calls) == []


def test_no_new_result_for_eight_calls() -> None:
    seen = [("get_status", f"job {i % 2}", True, f"state {i % 2}") for i in range(2)]
    calls = seen + [("get_status", f"job {i % 2}", True, f"state {i % 2}") for i in range(8)]
    found = dict(kinds(calls, LoopRules(repeat=0, cycles=0)))
    assert found == {"no_new_result": 10}


def test_a_batch_of_new_calls_each_answering_ok_is_progress() -> None:
    # a bulk agent: one update per record, each answered alike; new work every call
    calls = [("update_record", f"id {i}", True, "ok") for i in range(40)]
    assert kinds(calls) == []


def test_variations_that_all_fail_the_same_way_learn_nothing() -> None:
    calls = [("bash", "mvn compile", True, "BUILD SUCCESS")]
    calls += [("bash", f"mvn test -Dtest=T{i}", False, "BUILD FAILURE: T.java:3") for i in range(9)]
    found = dict(kinds(calls, LoopRules(repeat=0, cycles=0, same_failure=0)))
    assert found == {"no_new_result": 10}  # the first failure was new; 8 more were not


def test_a_long_chain_of_distinct_calls_fires_nothing() -> None:
    calls = [("run", f"step {i}", i % 5 != 0, f"output {i}") for i in range(200)]
    assert kinds(calls) == []


def test_each_kind_is_found_once_per_request() -> None:
    calls = [("search", "x", True, "same")] * 20
    assert [k for k, _ in kinds(calls)].count("repeated_call") == 1


def test_whitespace_does_not_make_a_result_new() -> None:
    calls = [
        ("search", "x", True, "a  b"),
        ("search", "x", True, "a b"),
        ("search", "x", True, "a\nb"),
    ]
    assert kinds(calls) == [("repeated_call", 3)]


@pytest.mark.parametrize("bad", [{"repeat": 1}, {"cycles": -1}, {"no_new_result": 33}])
def test_thresholds_are_off_or_at_least_two(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="loop rule"):
        LoopRules(**bad)


def test_a_rule_at_zero_is_off() -> None:
    calls = [("search", "x", True, "same")] * 10
    assert kinds(calls, LoopRules(repeat=0, no_new_result=0)) == []
