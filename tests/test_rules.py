from __future__ import annotations

from typing import Any

import pytest

from tracejudge.judges.rules import RuleJudge
from tracejudge.judges.verdicts import (
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
    assert verdict.remaining_steps and verdict.remaining_steps[0] in output


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
    verdict = judge.judge(
        window_of(
            trace(GOOD, [("search_flights", True)], planned=["search_flights", "book_reservation"])
        )
    )
    assert verdict.incomplete and verdict.remaining_steps == ["book_reservation"]
    # a failed planned call is not an executed one
    failed = judge.judge(
        window_of(
            trace(
                GOOD,
                [("search_flights", True), ("book_reservation", False)],
                planned=["search_flights", "book_reservation"],
            )
        )
    )
    assert failed.incomplete and not failed.success


def test_no_final_response_scores_zero_completeness() -> None:
    verdict = judge.judge(window_of(trace(None, [("search", True)]), "idle_timeout"))
    assert verdict.completeness == 0 and verdict.incomplete and verdict.success
    assert "idle timeout" in verdict.reasons[0]


def test_filler_and_short_outputs_lower_completeness() -> None:
    filler = judge.judge(window_of(trace("Ready to assist!", [])))
    assert filler.completeness == 25
    short = judge.judge(window_of(trace("Done.", [])))
    assert short.completeness == 50


def test_repeated_identical_calls_and_budget_cost_efficiency() -> None:
    events = trace(GOOD, [("search", True)] * 3)
    for e in events:
        if e["type"] == "tool_call":
            e["args_summary"] = "{}"
    repeated = judge.judge(window_of(events))
    assert repeated.efficiency == 84
    many = judge.judge(window_of(trace(GOOD, [(f"t{i}", True) for i in range(30)])))
    assert many.efficiency == 85


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
    disabled = rule_decision(window_of(events), Policy(enable_reflection=False), 0.0)
    assert disabled.reflection is None and not disabled.alerts
