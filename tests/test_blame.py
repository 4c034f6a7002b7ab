"""Every verdict that is not a clean pass names the step most likely responsible and who took
it, or abstains saying why; the judge's named step replaces the rules' when it is a step of the
run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_rules import window_of
from tracejudge.judges.llm.answer import JudgeAnswer
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.verdict.conclude import (
    DISABLED,
    JudgeOutcome,
    Policy,
    WindowFacts,
    conclude,
)
from tracejudge.models.outputs import Evaluation
from tracejudge.streams.demo.samples import sample_traces

judge = RuleJudge()


def evaluate(events: list[dict[str, Any]], outcome: JudgeOutcome = DISABLED) -> Evaluation:
    window = window_of(events)
    return conclude(
        WindowFacts.of(window), judge.judge(window), outcome, Policy(), "v", 0.0
    ).evaluation


def step(rid: str, i: int, **fields: Any) -> dict[str, Any]:
    return {"request_id": rid, "step_index": i, **fields}


def call(rid: str, i: int, tool: str, ok: bool, **more: Any) -> dict[str, Any]:
    return step(rid, i, type="tool_call", tool=tool, success=ok, **more)


def think(rid: str, i: int, actor: str, intent: str) -> dict[str, Any]:
    return step(rid, i, type="reasoning_step", phase="plan", intent_summary=intent, actor=actor)


def task(rid: str, goal: str = "refund order 7") -> dict[str, Any]:
    return {"type": "task_started", "request_id": rid, "goal": goal}


def final(rid: str, output: str) -> dict[str, Any]:
    return {"type": "final_response", "request_id": rid, "output": output}


def test_the_failure_never_made_good_is_blamed_on_its_step() -> None:
    e = evaluate(
        [
            task("b1"),
            call("b1", 1, "get_order", True),
            call("b1", 2, "refund", False, error="payment gateway timeout"),
            final("b1", "I could not refund the order."),
        ]
    )
    assert e.blame is not None and not e.blame.abstain
    # one agent ran: it is the one to blame, never the tool ("by refund")
    assert (e.blame.step_index, e.blame.actor, e.blame.source) == (2, None, "rules")
    assert "payment gateway timeout" in e.blame.reason and e.blame.confidence == 0.6


def test_in_a_one_agent_run_blame_names_the_agent_not_a_tool_or_a_graph_node() -> None:
    named = {**task("b1"), "agent_name": "support-bot"}
    e = evaluate(
        [
            named,
            think("b1", 1, "agent", "look the order up, then refund it"),
            call("b1", 2, "get_order", True, actor="tools"),
            call("b1", 3, "refund", False, error="payment gateway timeout", actor="tools"),
            final("b1", "I could not refund the order."),
        ]
    )
    assert e.blame is not None and (e.blame.step_index, e.blame.actor) == (3, "support-bot")
    unnamed = evaluate([task("b0"), think("b0", 1, "agent", "refund it"),
                        call("b0", 2, "refund", False, error="timeout", actor="tools"),
                        final("b0", "I could not refund the order.")])  # fmt: skip
    assert unnamed.blame is not None and unnamed.blame.actor == "agent"  # LangGraph's model node


def test_in_a_multi_agent_run_the_agent_that_wrote_the_failing_code_is_blamed() -> None:
    e = evaluate(
        [
            task("b2", "count the even addresses in the sheet"),
            think("b2", 1, "Planner", "split the work"),
            think("b2", 2, "Excel_Expert", "run this code to count the rows"),
            call("b2", 3, "run_code", False, error="KeyError: 'Street Address'",
                 actor="Computer_terminal"),
            final("b2", "The answer is 4."),
        ]
    )  # fmt: skip
    assert e.blame is not None
    assert (e.blame.step_index, e.blame.actor) == (2, "Excel_Expert")
    assert "wrote the call that failed" in e.blame.reason


def test_an_answer_that_leaves_the_action_pending_is_blamed_weakly_without_a_failure() -> None:
    e = evaluate(
        [task("b7", "cancel my booking"), call("b7", 1, "get_reservation", True),
         final("b7", "To proceed with the cancellation, I need to confirm a few details.")]
    )  # fmt: skip
    assert e.incomplete and e.blame is not None and not e.blame.abstain
    assert (e.blame.step_index, e.blame.confidence) == (2, 0.25)


def test_a_loop_is_blamed_where_it_began() -> None:
    repeated = [call("b3", i, "search", True, args_summary='{"q": "x"}') for i in range(3, 7)]
    e = evaluate(
        [task("b3"), call("b3", 1, "get_order", True), call("b3", 2, "lookup", True), *repeated,
         final("b3", "Searching did not find it.")]
    )  # fmt: skip
    assert e.blame is not None and e.blame.step_index == 3


def test_a_clean_pass_has_no_blame_and_a_failure_nothing_explains_abstains() -> None:
    clean = evaluate(
        [task("b4"), call("b4", 1, "get_order", True), call("b4", 2, "refund", True),
         final("b4", "Refunded order 7; the money reaches your card in 3 to 5 days.")]
    )  # fmt: skip
    assert clean.passed and clean.success and not clean.incomplete and clean.blame is None
    quiet = evaluate([task("b5"), final("b5", "ok")])
    assert not quiet.passed or quiet.incomplete
    assert quiet.blame is not None
    assert quiet.blame.abstain or quiet.blame.step_index is not None


@pytest.mark.parametrize(("index", "source"), [(1, "judge"), (99, "rules")])
def test_the_judges_step_is_taken_when_it_is_one_of_the_runs(index: int, source: str) -> None:
    answer = JudgeAnswer.model_validate(
        {
            "success": False,
            "incomplete": True,
            "summary": "the order was never looked up correctly",
            "blame": {"step_index": index, "actor": "made-up", "reason": "wrong order id",
                      "confidence": 0.7},
        }
    )  # fmt: skip
    e = evaluate(
        [
            task("b6"),
            call("b6", 1, "get_order", True),
            call("b6", 2, "refund", False, error="no such order"),
            final("b6", "I could not refund the order."),
        ],
        JudgeOutcome("ok", answer=answer),
    )
    assert e.blame is not None and e.blame.source == source
    if source == "judge":  # the run's own record of who took the step, not the judge's word
        assert (e.blame.step_index, e.blame.actor, e.blame.confidence) == (1, None, 0.7)
    else:
        assert e.blame.step_index == 2


def test_a_malformed_blame_from_the_judge_leaves_the_rest_of_its_answer() -> None:
    answer = JudgeAnswer.model_validate(
        {"success": True, "incomplete": False, "blame": {"step_index": "first", "confidence": 7}}
    )
    assert answer.blame is None and answer.success is True


def test_every_sample_verdict_that_is_not_a_clean_pass_names_a_step_or_abstains() -> None:
    for trace in sample_traces("blame"):
        e = evaluate(trace.events)
        clean = e.passed and e.success and not e.incomplete
        assert (e.blame is None) == clean, trace.request_id
        if e.blame is not None:
            assert e.blame.abstain or e.blame.step_index is not None
            assert e.blame.reason
