"""A run that ended by an error (`final_response.error`: an exception out of the agent, a root
span ended in ERROR) is failed and incomplete whatever its output says, and the judge's verdict
does not take that back; the step that raised is blamed."""

from __future__ import annotations

from typing import Any

from tests.test_rules import window_of
from tests.test_stopped_verdicts import RID, events, verdict_of
from tracejudge.judges.llm.answer import JudgeAnswer
from tracejudge.judges.rules.judge import CRASHED_CAP, RuleJudge
from tracejudge.judges.verdict.conclude import JudgeOutcome

ERROR = "RuntimeError: model backend unavailable"


def raised(step: int) -> dict[str, Any]:
    return {
        "type": "reasoning_step",
        "request_id": RID,
        "step_index": step,
        "phase": "synthesis",
        "intent_summary": "chat gpt-4o",
        "error": ERROR,
    }


def crashed(output: str = f"failed: {ERROR}", **more: Any) -> dict[str, Any]:
    return {
        "type": "final_response",
        "request_id": RID,
        "step_index": 9,
        "output": output,
        "error": ERROR,
        **more,
    }


def test_a_run_that_crashed_fails_is_incomplete_and_blames_the_step_that_raised() -> None:
    run = window_of([*events(2), raised(3), crashed()])
    e = verdict_of(run).evaluation
    assert not e.success and e.incomplete and not e.passed
    assert e.overall_score <= CRASHED_CAP < e.warn_threshold
    assert ("run_error", ERROR) in [(f.rule, f.evidence) for f in e.findings]
    assert e.blame is not None and e.blame.step_index == 3
    assert [r.step for r in e.remaining] == ["finish the user's request"]
    assert "ended with an error" in e.summary
    # the proof that it can fail: the same words without `error` pass as an answer
    plain = window_of([*events(2), {**crashed(), "error": None}])
    assert verdict_of(plain).evaluation.passed


def test_an_answer_given_before_the_crash_does_not_make_it_pass() -> None:
    run = window_of([*events(2), crashed("Order 7 is paid: 20 EUR.")])
    verdict = RuleJudge().judge(run)
    assert not verdict.success and verdict.incomplete and verdict.crashed is not None
    # no step says it raised: the final response carries the blame
    e = verdict_of(run).evaluation
    assert e.blame is not None and not e.blame.abstain


def test_the_judge_does_not_take_the_crash_back() -> None:
    run = window_of([*events(2), raised(3), crashed()])
    pleased = JudgeAnswer.model_validate(
        {
            "success": True,
            "incomplete": False,
            "summary": "answered the user",
            "correctness": 100,
            "relevance": 100,
            "actionability": 100,
        }
    )
    e = verdict_of(run, JudgeOutcome("ok", answer=pleased)).evaluation
    assert not e.success and e.incomplete and not e.passed
    low = verdict_of(run, warn_threshold=40).evaluation
    assert not low.passed and low.overall_score <= 39
