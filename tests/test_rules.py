from __future__ import annotations

from typing import Any

import pytest

from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.verdict.conclude import (
    DISABLED,
    Policy,
    Verdict,
    WindowFacts,
    conclude,
    evaluator_version,
)
from tracejudge.models.events import parse_event
from tracejudge.models.window import Window, assemble_window
from tracejudge.streams.demo.samples import sample_traces


def window_of(events: list[dict[str, Any]], closed_by: str = "final_response") -> Window:
    parsed = [parse_event(e) for e in events]
    steps = sum(1 for e in events if e["type"] not in {"task_started", "final_response"})
    return assemble_window(
        events[0]["request_id"],
        parsed,
        closed_by=closed_by,  # type: ignore[arg-type]
        step_count=steps,
        steps_dropped=0,
    )


def trace(
    output: str | None,
    calls: list[tuple[str, bool]],
    planned: list[str] | None = None,
    validation: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    rid = "r"
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": rid, "goal": "do it", "planned_steps": planned or []}
    ]
    for i, (tool, ok) in enumerate(calls):
        events.append(
            {
                "type": "tool_call",
                "request_id": rid,
                "step_index": i + 1,
                "tool": tool,
                "success": ok,
                "args_summary": f'{{"i": {i}}}',
                "error": None if ok else f"{tool} broke",
            }
        )
    if output is not None:
        final: dict[str, Any] = {"type": "final_response", "request_id": rid, "output": output}
        if validation:
            final["validation"] = validation
        events.append(final)
    return events


def rule_decision(window: Window, policy: Policy | None = None, now: float = 0.0) -> Verdict:
    return conclude(
        WindowFacts.of(window),
        judge.judge(window),
        DISABLED,
        policy or Policy(),
        evaluator_version(judge.version),
        now,
    )


GOOD = "Your reservation ABC123 is booked for May 20; the total of $320 was charged."
judge = RuleJudge()


@pytest.mark.parametrize("sample", sample_traces("unit"), ids=lambda s: s.name)
def test_sample_cases_get_their_verdicts(sample: Any) -> None:
    verdict = judge.judge(window_of(sample.events, sample.expect_closed_by))
    assert (verdict.success, verdict.incomplete) == (
        sample.expect_success,
        sample.expect_incomplete,
    )


def test_clean_run_scores_high() -> None:
    verdict = judge.judge(window_of(trace(GOOD, [("search", True), ("book", True)])))
    assert verdict.rule_score >= 95 and verdict.success and not verdict.incomplete
    assert verdict.reasons == []


def test_failure_redone_later_is_success_but_costs_health() -> None:
    redone = judge.judge(window_of(trace(GOOD, [("book", False), ("book", True)])))
    assert redone.success and redone.failed_steps == []
    assert redone.execution_health < 100
    unrecovered = judge.judge(window_of(trace(GOOD, [("book", True), ("pay", False)])))
    assert not unrecovered.success
    assert [(f.index, f.tool, f.reason) for f in unrecovered.failed_steps] == [
        (2, "pay", "pay broke")
    ]
    assert unrecovered.execution_health < redone.execution_health


def test_validator_block_is_failure_and_warn_costs_health() -> None:
    blocked = judge.judge(
        window_of(trace(GOOD, [], validation={"verdict": "block", "reasons": ["PII"]}))
    )
    assert not blocked.success and blocked.execution_health <= 20
    warned = judge.judge(window_of(trace(GOOD, [], validation={"verdict": "warn"})))
    assert warned.success and warned.execution_health == 85


@pytest.mark.parametrize(
    "output",
    [
        "Booked the flight. Remaining steps: email the receipt.",
        "I booked the flight but still need to email the receipt.",
        "The refund has not been completed yet.",
        "航班已预订。剩余步骤：发送确认邮件。",
        "退款尚未处理，需要人工审核。",
        "订单已创建，还需要完成付款。",
    ],
)
def test_output_saying_work_remains_is_incomplete(output: str) -> None:
    verdict = judge.judge(window_of(trace(output, [("book", True)])))
    assert verdict.incomplete and verdict.success
    # what is left is named as work, never by echoing the answer's prose
    [left] = verdict.remaining
    assert left.kind == "request_pending" and left.step == "finish the user's request"
    assert "says work remains" in left.why and verdict.remaining_steps[0] not in output


@pytest.mark.parametrize(
    "output",
    [
        GOOD,
        "All steps are complete: the flight is booked and the receipt was emailed.",
        "航班已预订，确认邮件已发送。",
    ],
)
def test_finished_output_is_not_incomplete(output: str) -> None:
    assert not judge.judge(window_of(trace(output, [("book", True)]))).incomplete


def test_planned_steps_not_executed_are_remaining() -> None:
    claim = "I have booked reservation ABC123 for May 20."
    verdict = judge.judge(
        window_of(
            trace(claim, [("search_flights", True)], planned=["search_flights", "book_reservation"])
        )
    )
    assert verdict.incomplete and verdict.remaining[0].step == "book_reservation"
    assert verdict.remaining[0].kind == "planned_step"
    # and the answer's claim is held against a trace with nothing but a search in it
    assert ("claim_without_call", claim) in verdict.findings
    # a planned call that ran and failed is executed: it decides success instead
    failed = judge.judge(
        window_of(
            trace(
                GOOD,
                [("search_flights", True), ("book_reservation", False)],
                planned=["search_flights", "book_reservation"],
            )
        )
    )
    assert not failed.incomplete and not failed.success


def test_no_final_response_scores_zero_completeness() -> None:
    verdict = judge.judge(window_of(trace(None, [("search", True)]), "idle_timeout"))
    assert verdict.completeness == 0 and verdict.incomplete and verdict.success
    assert "idle timeout" in verdict.reasons[0]


def test_filler_and_short_outputs_lower_completeness() -> None:
    filler = judge.judge(window_of(trace("Ready to assist!", [])))
    assert filler.completeness == 25
    short = judge.judge(window_of(trace("Booked it, see you.", [("book", True)])))
    assert short.completeness == 85  # brief, not a placeholder


def test_a_loop_of_identical_calls_costs_and_a_set_budget_applies_none_by_default() -> None:
    events = trace(GOOD, [("search", True)] * 3)
    for e in events:
        if e["type"] == "tool_call":
            e["args_summary"] = "{}"
    looped = judge.judge(window_of(events))
    assert ("identical_call_loop", "search {}") in looped.findings
    assert looped.execution_health == 85
    many = window_of(trace(GOOD, [(f"t{i}", True) for i in range(30)]))
    assert judge.judge(many).efficiency == 100  # no fixed budget: long only against its agent
    assert RuleJudge(tool_call_budget=25).judge(many).efficiency == 85  # 5 over a set budget


def test_decide_builds_deterministic_ids_and_alerts() -> None:
    window = window_of(trace(None, [("pay", False)]), "idle_timeout")
    first = rule_decision(window, Policy(warn_threshold=60), 1.0)
    second = rule_decision(window, Policy(warn_threshold=60), 2.0)
    assert first.evaluation.evaluation_id == second.evaluation.evaluation_id
    assert not first.evaluation.passed
    assert [a.kind for a in first.alerts] == ["low_score"]
    assert first.reflection is not None and first.reflection.reflection_round == 1
    other = window.model_copy(update={"request_id": "other"})
    assert rule_decision(other, Policy(), 1.0).evaluation.evaluation_id != (
        first.evaluation.evaluation_id
    )


@pytest.mark.parametrize(
    ("success", "incomplete", "reflect"),
    [(True, False, False), (True, True, True), (False, True, True), (False, False, False)],
)
def test_reflection_follows_incomplete_only(success: bool, incomplete: bool, reflect: bool) -> None:
    calls = [("book", True)] + ([] if success else [("notify", False)])
    output = GOOD + (" Remaining steps: email the receipt." if incomplete else "")
    window = window_of(trace(output, calls))
    decision = rule_decision(window, Policy(), 0.0)
    assert (decision.evaluation.success, decision.evaluation.incomplete) == (success, incomplete)
    assert (decision.reflection is not None) == reflect


def test_reflection_limit_turns_into_an_alert() -> None:
    events = trace(GOOD + " Remaining steps: email it.", [("book", True)])
    events[0]["reflection_round"] = 2
    decision = rule_decision(window_of(events), Policy(max_reflection_rounds=2), 0.0)
    assert decision.reflection is None
    assert "reflection_exhausted" in [a.kind for a in decision.alerts]
    disabled = rule_decision(window_of(events), Policy(reflection_enabled=False), 0.0)
    assert disabled.reflection is None and not disabled.alerts


# --- the answer against the trace (judges/rules/claims.py) -------------------------------------


@pytest.mark.parametrize(
    ("output", "calls"),
    [
        (
            "I have cancelled your reservation ABC123 and the refund is on its way.",
            [("get_res", True)],
        ),
        ("Your booking has been successfully cancelled.", [("cancel_reservation", False)]),
        ("The address is now updated and we emailed you a receipt.", [("get_order", True)]),
        ("I've updated the shipping address for order 77.", []),
        ("已为您取消预订，退款将在3天内到账。", [("search", True)]),
        ("订单已修改成功。", [("modify_order", False)]),
    ],
)
def test_an_announced_action_no_successful_call_did_is_incomplete(
    output: str, calls: list[tuple[str, bool]]
) -> None:
    verdict = judge.judge(window_of(trace(output, calls)))
    assert verdict.incomplete and verdict.rule_score <= 79
    assert [rule for rule, _ in verdict.findings].count("claim_without_call") >= 1
    assert any(left.kind == "claimed_not_done" for left in verdict.remaining)


@pytest.mark.parametrize(
    ("output", "calls"),
    [
        # backed by a call
        ("I have cancelled your reservation ABC123.", [("cancel_reservation", True)]),
        # a tool does more than its name says: booking charges the card
        ("Your flight is booked and your card was charged $320.", [("book_reservation", True)]),
        # a question, a condition, a negation: no claim
        ("Have you already cancelled the old booking?", []),
        ("Once it has been cancelled, you will get an e-mail.", []),
        ("I cancelled nothing; your booking is unchanged.", [("get_res", True)]),
        ("Your reservation has not been cancelled yet, as you asked.", []),
        # describing the record that was looked up is not a claim of having acted
        ("Your reservation was created on May 1 and the insurance was purchased.", [("get", True)]),
        ("Unfortunately, the cancellation cannot be processed under the 24-hour policy.", []),
        ("If you are unable to locate it, contact support; I have the rest ready.", []),
        ("您的订单未取消，仍然有效。", []),
    ],
)
def test_claims_that_are_backed_or_not_claims_pass(
    output: str, calls: list[tuple[str, bool]]
) -> None:
    verdict = judge.judge(window_of(trace(output + " " + "Details follow." * 3, calls)))
    assert "claim_without_call" not in [rule for rule, _ in verdict.findings], verdict.findings


@pytest.mark.parametrize(
    ("output", "rule"),
    [
        (
            "I was unable to process the refund because the payment service timed out.",
            "admitted_failure",
        ),
        (
            "Unfortunately the change could not be completed; the seat map was locked.",
            "admitted_failure",
        ),
        ("很抱歉，未能为您完成改签，系统返回错误。", "admitted_failure"),
        ("I have transferred you to a human agent who will finish the refund.", "handoff"),
        ("已为您转人工客服处理。", "handoff"),
        ("The exact founding year could not be determined from the sources.", "admitted_failure"),
        ("I could not find the paper's sample size; no results were found.", "admitted_failure"),
        ("未找到相关数据，无法确定答案。", "admitted_failure"),
        ("FINAL ANSWER: Unable to determine", "admitted_failure"),
        ("TERMINATE", "placeholder_answer"),
        ("Done.", "placeholder_answer"),
    ],
)
def test_admitted_failures_hand_offs_and_placeholders_are_incomplete(
    output: str, rule: str
) -> None:
    verdict = judge.judge(window_of(trace(output, [("lookup", True)])))
    assert verdict.incomplete and verdict.rule_score <= 79
    assert rule in [r for r, _ in verdict.findings]


def test_a_policy_refusal_is_not_an_admitted_failure() -> None:
    # explaining why something cannot be done is often the right answer (left to the LLM judge)
    output = "I'm sorry, but basic economy tickets cannot be changed under our policy."
    verdict = judge.judge(window_of(trace(output, [("get_reservation_details", True)])))
    assert not verdict.incomplete


def test_an_attempted_planned_step_that_failed_is_not_remaining_work() -> None:
    # the seed's fourth quadrant: everything that had to run ran, one step failed
    events = trace(
        "Pinged all three endpoints: api and web answered, db refused the connection.",
        [("ping_api", True), ("ping_web", True), ("ping_db", False)],
        planned=["ping_api", "ping_web", "ping_db"],
    )
    verdict = judge.judge(window_of(events))
    assert (verdict.success, verdict.incomplete) == (False, False)
    assert verdict.failed_steps[0].tool == "ping_db"


def test_planned_steps_written_as_descriptions_count_as_done_when_as_many_ran() -> None:
    # the design's rule is a count; two described steps, both run
    planned = ["look up the customer's order", "issue the refund for the damaged item"]
    calls = [("get_order", True), ("refund", True)]
    output = "Your refund of $20 for order 1234 has been issued."
    done = judge.judge(window_of(trace(output, calls, planned=planned)))
    assert done.incomplete is False and done.remaining_steps == []
    short = judge.judge(window_of(trace("Order 1234 is a $20 mug.", calls[:1], planned=planned)))
    assert short.incomplete is True
    assert short.remaining[0].step == "issue the refund for the damaged item"


def test_a_planned_tool_name_never_called_is_missing_whatever_else_ran() -> None:
    calls = [("search_flights", True), ("get_weather", True)]
    planned = ["search_flights", "book_reservation"]
    output = "Found 3 flights to Boston; the weather there is sunny."
    verdict = judge.judge(window_of(trace(output, calls, planned=planned)))
    assert verdict.incomplete is True and "book_reservation" in [r.step for r in verdict.remaining]


def test_the_rule_judge_is_a_judge_and_the_public_api_resolves() -> None:
    import tracejudge.judges as judges

    assert isinstance(RuleJudge(), judges.Judge)
    assert all(getattr(judges, name) is not None for name in judges.__all__)

    class Strict:  # a judge of one's own: whatever the trace, never complete
        version = "strict-1"

        def judge(self, window: Window, stats: object = None, norms: object = None) -> object:
            return RuleJudge().judge(window).model_copy(update={"incomplete": True})

    assert isinstance(Strict(), judges.Judge)
    verdict = rule_decision_with(Strict(), window_of(trace(GOOD, [("book", True)])))
    assert verdict.evaluation.incomplete and verdict.reflection is not None


def rule_decision_with(judge_: object, window: Window) -> Verdict:
    rules = judge_.judge(window)  # type: ignore[attr-defined]
    return conclude(WindowFacts.of(window), rules, DISABLED, Policy(), "v", 0.0)
