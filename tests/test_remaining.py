"""What a run left undone is named from its trace, never from its answer's prose; a follow-up
that does the step clears it."""

from __future__ import annotations

from typing import Any

from tests.test_rules import window_of
from tracejudge.judges.rules.judge import RuleJudge

judge = RuleJudge()


def run(
    calls: list[tuple[str, bool, str | None]],
    output: str | None,
    planned: list[str] | None = None,
    rid: str = "r1",
    **task: Any,
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {
            "type": "task_started",
            "request_id": rid,
            "goal": "look up order 7 and refund it",
            "planned_steps": planned or [],
            **task,
        }
    ]
    for i, (tool, ok, error) in enumerate(calls, start=1):
        events.append(
            {
                "type": "tool_call",
                "request_id": rid,
                "step_index": i,
                "tool": tool,
                "args_summary": '{"order_id": 7}',
                "success": ok,
                "error": error,
            }
        )
    if output is not None:
        events.append({"type": "final_response", "request_id": rid, "output": output})
    return events


def test_a_failed_refund_is_the_work_left_not_the_answer_that_admits_it() -> None:
    verdict = judge.judge(
        window_of(
            run(
                [("get_order", True, None), ("refund", False, "payment gateway timeout")],
                "I could not refund the order.",
            )
        )
    )
    assert verdict.incomplete and not verdict.success
    [left] = verdict.remaining
    assert (left.kind, left.step, left.tool, left.step_index) == (
        "failed_call",
        "refund",
        "refund",
        2,
    )
    assert left.args == '{"order_id": 7}' and left.error == "payment gateway timeout"
    [line] = verdict.remaining_steps
    assert line.startswith("refund(") and "payment gateway timeout" in line
    assert "I could not refund the order." not in line


def test_an_admitted_failure_the_run_went_on_from_names_the_call_never_made_good() -> None:
    # the refund failed, a later mail succeeded: not the run's last error, but the answer owns
    # up to it, and no later refund succeeded
    verdict = judge.judge(
        window_of(
            run(
                [
                    ("refund", False, "card expired"),
                    ("lookup", False, "not found"),
                    ("lookup", True, None),
                    ("send_email", True, None),
                ],
                "I was unable to refund the charge; I emailed you instead.",
            )
        )
    )
    assert [(r.kind, r.step, r.error) for r in verdict.remaining] == [
        ("failed_call", "refund", "card expired")
    ]


def test_a_planned_step_never_attempted_is_named_as_declared() -> None:
    verdict = judge.judge(
        window_of(
            run(
                [("get_order", True, None)],
                "I looked up order 7 and refunded it.",
                planned=["get_order", "refund", "send_confirmation"],
            )
        )
    )
    steps = [(r.kind, r.step) for r in verdict.remaining]
    assert ("planned_step", "refund") in steps and ("planned_step", "send_confirmation") in steps
    assert all(
        "declared in the plan" in r.why for r in verdict.remaining if r.kind == "planned_step"
    )


def test_with_nothing_in_the_trace_the_pending_request_is_named_not_quoted() -> None:
    verdict = judge.judge(window_of(run([], None), closed_by="idle_timeout"))
    [left] = verdict.remaining
    assert left.kind == "request_pending" and left.step == "answer the user's request"
    assert "no final response" in left.why


def test_a_follow_up_that_does_the_step_clears_it() -> None:
    origin = judge.judge(
        window_of(
            run(
                [("get_order", True, None), ("refund", False, "payment gateway timeout")],
                "I could not refund the order.",
            )
        )
    )
    # the follow-up declares the origin's remaining steps as its plan (the client does)
    plan = [r.step for r in origin.remaining]
    done = judge.judge(
        window_of(
            run(
                [("refund", True, None)],
                "Refunded order 7: the money is on its way.",
                planned=plan,
                rid="r1-followup",
                parent_request_id="r1",
                reflection_round=1,
            )
        )
    )
    assert done.success and not done.incomplete and done.remaining == []
    again = judge.judge(
        window_of(
            run(
                [("refund", False, "payment gateway timeout")],
                "I still could not refund it.",
                planned=plan,
                rid="r1-followup-2",
            )
        )
    )
    assert [r.step for r in again.remaining] == ["refund"]
