"""The design's `success` is the executed steps': a step that failed and was never made good
keeps it false whatever the LLM judge answers (the judge still moves the score and
`incomplete`), and a run that went round in a loop and then said it could not do the job does
not pass, whoever reads it."""

from __future__ import annotations

from tests.test_rules import window_of
from tests.test_stopped_verdicts import answer, events, told, verdict_of
from tracejudge.judges.llm.answer import JudgeAnswer
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.verdict.conclude import JudgeOutcome
from tracejudge.streams.demo.samples import sample_traces

PLEASED = JudgeAnswer.model_validate(
    {
        "success": True,
        "incomplete": False,
        "summary": "the run did what was asked",
        "correctness": 85,
        "relevance": 85,
        "actionability": 85,
    }
)
JUDGED = JudgeOutcome("ok", answer=PLEASED)


def sample(name: str) -> list[dict[str, object]]:
    return next(t.events for t in sample_traces("j") if t.name == name)


def test_a_failure_never_made_good_keeps_success_false_whatever_the_judge_says() -> None:
    # the demo's "payment gateway timeout, never retried"
    e = verdict_of(window_of(sample("failed, incomplete")), JUDGED).evaluation
    assert not e.success
    assert [(f.index, f.tool) for f in e.failed_steps] == [(2, "refund_payment")]
    assert any("never made good" in r and "step 2, refund_payment" in r for r in e.reasons)
    # the judge still moves what is its to move: the score, and `incomplete`
    rules_only = verdict_of(window_of(sample("failed, incomplete"))).evaluation
    assert e.overall_score != rules_only.overall_score and not e.incomplete


def test_the_judge_still_decides_a_run_whose_failures_were_made_good() -> None:
    e = verdict_of(window_of(sample("success, complete")), JUDGED).evaluation
    assert e.success and not e.incomplete and e.passed
    # a failed look-up fixed by the next call is how agents work: not a failed step
    start, plan, search, booking, final = sample("success, complete")
    timed_out = {**search, "success": False, "error": "timeout", "result_preview": None}
    retried = [start, plan, timed_out, {**search, "step_index": 3}, {**booking, "step_index": 4}]
    assert verdict_of(window_of([*retried, {**final, "step_index": 5}]), JUDGED).evaluation.success


def test_a_run_that_loops_and_then_gives_up_does_not_pass() -> None:
    run = told(
        events(20, answer("I could not tell.")),
        ("loop", "repeat", "steer", 6),
        ("loop", "repeat", "steer", 12),
    )
    rules = RuleJudge().judge(run)
    assert rules.gave_up is not None
    assert ("looped_then_gave_up", "'I could not tell.'") in rules.findings
    for outcome in (JUDGED, None):
        e = (verdict_of(run, outcome) if outcome else verdict_of(run)).evaluation
        assert not e.passed and e.incomplete, outcome
        assert e.overall_score < e.warn_threshold
    # calibrated lower, still below
    assert not verdict_of(run, JUDGED, warn_threshold=30).evaluation.passed


def test_a_loop_alone_or_a_give_up_alone_is_judged_as_before() -> None:
    answered = told(events(20, answer("Order 7 is paid: 20 EUR.")), ("loop", "repeat", "steer", 6))
    assert RuleJudge().judge(answered).gave_up is None
    assert verdict_of(answered, JUDGED).evaluation.passed
    # no loop: one look-up, then "I could not tell": incomplete work, not a spent run
    short = window_of(events(1, answer("I could not tell.")))
    assert RuleJudge().judge(short).gave_up is None
