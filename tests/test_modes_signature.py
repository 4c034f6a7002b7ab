"""Failure modes from what a verdict knows: errors folded into templates, signatures and names."""

from __future__ import annotations

from tracejudge.judges.modes.errors import template
from tracejudge.judges.modes.signature import mode_of, tools_before
from tracejudge.models.events import ToolCall


def test_the_same_failure_with_other_ids_is_one_template() -> None:
    a = template("Error: flight HAT030 not available on date 2024-05-13")
    b = template("Error: flight UA112 not available on date 2024-06-01")
    assert a == b == "Error: flight <ID> not available on date <DATE>"
    assert template("HTTP 503 from https://pay.example/v1/refund/123") == "HTTP 503 from <URL>"
    assert template("HTTP 503 x") != template("HTTP 502 x")  # the status is kept
    raised = "exitcode: 1 (execution failed)\nCode output: Traceback (most recent call last):\n"
    raised += "  File \"a.py\", line 3\nModuleNotFoundError: No module named 'pandas'"
    assert template(raised) == "ModuleNotFoundError: No module named <STR>"
    assert template(None) is None and template("  ") is None
    assert len(template("x" * 100_000) or "") <= 160


def test_a_tracebacks_mode_is_its_exception_whatever_its_class_is_called() -> None:
    """The exception line is the first at the margin after the last frame: a class not named
    "...Error" (a driver's UniqueViolation, StopIteration) once left a traceback named by its
    header, every traceback of a tool one mode; a long one keeps its end when clipped."""
    frames = "".join(
        f'  File "/app/m{i}.py", line {i}, in f{i}\n    call{i}()\n' for i in range(900)
    )
    long = "Traceback (most recent call last):\n" + frames
    long += 'psycopg.errors.UniqueViolation: duplicate key value violates "orders_pkey"\n'
    long += "DETAIL: Key (id)=(8812) already exists.\n"
    clipped = ToolCall.model_validate(
        {"type": "tool_call", "request_id": "r", "step_index": 1, "tool": "save",
         "success": False, "error": long}
    )  # fmt: skip
    assert clipped.clipped == ["error"]  # the middle cut, its end kept
    assert (
        template(clipped.error)
        == "psycopg.errors.UniqueViolation: duplicate key value violates <STR>"
    )
    carets = 'Traceback (most recent call last):\n  File "a.py", line 3, in <module>\n'
    assert template(carets + "    next(it)\n    ^^^^^^^^\nStopIteration") == "StopIteration"
    chained = carets + "    raise A\nA: one\n\nDuring handling of the above exception, another "
    chained += 'exception occurred:\n\nTraceback (most recent call last):\n  File "b.py", line 9\n'
    assert template(chained + "mylib.Refused: no quota for user 4411") == (
        "mylib.Refused: no quota for user <N>"  # the last exception, not the first
    )


def test_a_failing_tool_names_its_mode_with_its_error_and_the_call_before_it() -> None:
    evaluation = {
        "passed": False, "success": False, "incomplete": True, "agent_name": "shop",
        "failed_steps": [{"index": 3, "tool": "refund_order", "reason": "HTTP 503 (req 8f3a2c91)"}],
    }  # fmt: skip
    before = tools_before(["get_user", "lookup_order", "refund_order", "refund_order"])
    assert before == {"lookup_order": "get_user", "refund_order": "lookup_order"}
    mode = mode_of(evaluation, before)
    assert mode is not None and mode.kind == "tool_error"
    assert mode.name == "refund_order fails with HTTP 503 (req <HEX>) after lookup_order"
    other = {
        **evaluation,
        "failed_steps": [{"tool": "refund_order", "reason": "HTTP 503 (req 77aa11bb)"}],
    }
    # another id, another call before it: the same mode (an outage fails it whatever came first)
    again = mode_of(other, {"refund_order": "get_user"})
    assert again is not None and again.key == mode.key
    assert mode_of({**evaluation, "agent_name": "other-agent"}, before).key != mode.key  # type: ignore[union-attr]
    worse = {**evaluation, "failed_steps": [{"tool": "refund_order", "reason": "HTTP 502 x"}]}
    assert mode_of(worse).key != mode.key  # type: ignore[union-attr]


def test_clean_passes_have_no_mode_and_rules_checks_and_stops_name_theirs() -> None:
    assert mode_of({"passed": True, "success": True, "incomplete": False}) is None
    base = {"passed": False, "success": True, "incomplete": True, "agent_name": "shop"}
    rule = mode_of({**base, "findings": [{"rule": "pending_action", "evidence": ""}]})
    assert rule is not None and rule.name == "leaves an action it promised pending"
    check = mode_of({**base, "findings": [{"rule": "check:needs_confirmation"},
                                          {"rule": "pending_action"}]})  # fmt: skip
    assert check is not None and check.name == "the team's check needs_confirmation fails"
    stop = {"kind": "loop", "crossed": "repeat", "action": "stop", "stopped_after": True}
    ended = [{"rule": "stopped_by_intervention", "evidence": "loop repeat"}]
    stopped = mode_of({**base, "interventions": [stop], "findings": ended})
    assert stopped is not None and stopped.name == "stopped by a loop repeat"
    # a stop sent after the run had answered ended nothing: judged on its work, no such mode
    assert mode_of({**base, "interventions": [stop]}).kind == "other"  # type: ignore[union-attr]
    # the step the blame names, where it is not the agent itself: a loop on one tool is its own
    looping = {**base, "findings": [{"rule": "identical_call_loop"}],
               "blame": {"actor": "search_flights", "reason": "a loop"}}  # fmt: skip
    loop = mode_of(looping)
    assert loop is not None and loop.name == "repeats the same call (at search_flights)"
    mine = mode_of({**looping, "blame": {"actor": "shop", "reason": "a loop"}})
    assert mine is not None and mine.name == "repeats the same call" and mine.key != loop.key


def test_a_judges_reading_is_grouped_by_what_it_blames_not_by_its_words() -> None:
    base = {"passed": False, "success": True, "incomplete": True, "agent_name": "shop"}
    blame = {"source": "judge", "actor": "planner"}
    one = mode_of({**base, "blame": {**blame, "reason": "The planner never booked flight HAT030."}})
    two = mode_of({**base, "blame": {**blame, "reason": "It did not book the trip asked for."}})
    assert one is not None and two is not None and one.key == two.key
    assert one.name == "the judge finds it left incomplete (at planner)"
    assert one.error == "The planner never booked flight <ID>."


def test_a_loop_names_the_call_it_repeats() -> None:
    base = {"passed": False, "success": True, "incomplete": True, "agent_name": "coder"}
    loop = mode_of({**base, "findings": [{"rule": "identical_call_loop",
                                          "evidence": "bash ./mvnw test"}]})  # fmt: skip
    other = mode_of({**base, "findings": [{"rule": "identical_call_loop",
                                           "evidence": "scroll_down scroll_down"}]})  # fmt: skip
    assert loop is not None and other is not None and loop.key != other.key
    assert loop.name == "repeats the same call (at bash)"
