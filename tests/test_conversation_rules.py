"""Rules that read the conversation: actions left pending, confirmations never acted on, state
changes without a go-ahead, and several kinds of trouble in one run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_rules import judge, rule_decision, window_of
from tracejudge.judges.rules.agent_norms import Norm, Norms
from tracejudge.judges.rules.conversation import pending_action, unconfirmed_changes

Turn = tuple[str, Any]  # ("user", text) | ("agent", text) | ("call", (tool, ok))


def conversation(goal: str, turns: list[Turn], output: str) -> list[dict[str, Any]]:
    rid = "c"
    events: list[dict[str, Any]] = [{"type": "task_started", "request_id": rid, "goal": goal}]
    events.append({"type": "user_message", "request_id": rid, "step_index": 1, "text": goal})
    for i, (kind, value) in enumerate(turns, start=2):
        if kind == "user":
            events.append(
                {"type": "user_message", "request_id": rid, "step_index": i, "text": value}
            )
        elif kind == "agent":
            events.append(
                {
                    "type": "reasoning_step",
                    "request_id": rid,
                    "step_index": i,
                    "phase": "synthesis",
                    "intent_summary": value,
                }
            )
        else:
            tool, ok = value
            events.append(
                {
                    "type": "tool_call",
                    "request_id": rid,
                    "step_index": i,
                    "tool": tool,
                    "success": ok,
                    "args_summary": f'{{"step": {i}}}',
                    "error": None if ok else f"{tool} refused",
                }
            )
    events.append({"type": "final_response", "request_id": rid, "output": output})
    return events


def rules_fired(events: list[dict[str, Any]]) -> list[str]:
    return [rule for rule, _ in judge.judge(window_of(events)).findings]


@pytest.mark.parametrize(
    "output",
    [
        "I understand. I will proceed with downgrading all your reservations to economy.",
        "Here is the new total of $410. Would you like to proceed with this cancellation?",
        "To proceed with the cancellation, I need your reservation ID.",
        "Everything is ready. Please confirm, and I'll proceed with the booking.",
        "Let's continue with booking your new flight from San Francisco.",
        "我将为您取消该预订。",
        "新的价格是 320 元，请确认是否继续取消订单？",
        "为了继续办理改签，需要您提供订单号。",
    ],
)
def test_an_answer_that_leaves_the_action_pending_is_incomplete(output: str) -> None:
    events = conversation(
        "I need to change my flight.", [("call", ("get_reservation", True))], output
    )
    verdict = judge.judge(window_of(events))
    assert verdict.incomplete and verdict.rule_score <= 79
    assert "pending_action" in [rule for rule, _ in verdict.findings]
    assert any(step.startswith("carry out") for step in verdict.remaining_steps)


@pytest.mark.parametrize(
    "output",
    [
        # offering a hand-off is how a correct refusal ends
        "Basic economy cannot be changed. Would you like me to transfer you to a human agent?",
        "Unfortunately that is not refundable. I can transfer you to a specialist. "
        "Would you like me to do that?",
        # a condition, not an announcement
        "Once you have the reservation ID, I'll cancel it for you right away.",
        "Is there anything else I can help you with today?",
        "Your reservation ABC123 has been cancelled and the refund is on its way.",
        "这张机票不能改签。是否需要为您转人工客服？",
        "Could you confirm the date of your original booking?",
    ],
)
def test_offers_conditions_and_finished_answers_leave_nothing_pending(output: str) -> None:
    assert pending_action(output) is None


def test_a_confirmed_action_no_call_performed_is_incomplete() -> None:
    events = conversation(
        "Please cancel my trip.",
        [
            ("agent", "Reservation ABC123, refund to your card. Shall I cancel it now?"),
            ("user", "Yes, please go ahead."),
            ("call", ("get_reservation", True)),
        ],
        "Thanks for your patience, all set! Have a great trip.",
    )
    verdict = judge.judge(window_of(events))
    assert verdict.incomplete
    assert "confirmed_not_done" in [rule for rule, _ in verdict.findings]
    assert any("Yes, please go ahead" in step for step in verdict.remaining_steps)


def test_a_confirmed_action_in_chinese_no_call_performed_is_incomplete() -> None:
    events = conversation(
        "帮我取消订单",
        [("agent", "订单 123 将退款到原卡。请确认是否取消该订单？"), ("user", "是的，确认取消。")],
        "好的，祝您生活愉快！",
    )
    assert "confirmed_not_done" in rules_fired(events)


@pytest.mark.parametrize(
    "after",
    [
        # the confirmed call ran
        [("call", ("cancel_reservation", True))],
        # the user took it back
        [("user", "Actually, never mind, hold off on that for now.")],
        # the agent said why it could not be done
        [("agent", "Unfortunately this fare cannot be cancelled under the 24-hour policy.")],
    ],
)
def test_a_confirmation_that_was_acted_on_withdrawn_or_explained_is_not_flagged(
    after: list[Turn],
) -> None:
    events = conversation(
        "Please cancel my trip.",
        [
            ("agent", "Shall I cancel reservation ABC123 now?"),
            ("user", "Yes, please go ahead."),
            *after,
        ],
        "Thank you for contacting us. Anything else I can help with?",
    )
    assert "confirmed_not_done" not in rules_fired(events)


def test_a_yes_to_a_question_of_fact_is_not_a_confirmed_action() -> None:
    events = conversation(
        "Why was my flight delayed?",
        [
            ("agent", "Could you confirm your user ID is mia_li_3668?"),
            ("user", "Yes, that's correct."),
            ("call", ("get_flight_status", True)),
        ],
        "Your flight HAT039 was delayed by weather at the departure airport.",
    )
    assert "confirmed_not_done" not in rules_fired(events)


def test_a_change_right_after_a_choice_is_made_without_a_go_ahead() -> None:
    events = conversation(
        "I want to book a flight to Seattle.",
        [
            ("agent", "Option 1 is $305, option 2 is $255. Which one would you like?"),
            ("user", "I'll go with option 2."),
            ("call", ("book_reservation", True)),
        ],
        "Your flight to Seattle is booked, reservation HAT9X1, $255 charged to your card.",
    )
    found = unconfirmed_changes(window_of(events))
    assert found and found[0].startswith("book_reservation after 'I'll go with option 2")
    verdict = judge.judge(window_of(events))
    assert "change_without_go_ahead" in [rule for rule, _ in verdict.findings]
    assert verdict.success and not verdict.incomplete  # a process finding, not a verdict


@pytest.mark.parametrize("yes", ["Yes, please book it.", "Go ahead.", "是的，请办理。", "确认预订"])
def test_a_change_after_an_explicit_go_ahead_or_a_one_shot_request_is_fine(yes: str) -> None:
    confirmed = conversation(
        "I want to book a flight to Seattle.",
        [("agent", "Option 2 is $255. Shall I book it?"), ("user", yes), ("call", ("book", True))],
        "Booked: reservation HAT9X1, $255 charged.",
    )
    assert unconfirmed_changes(window_of(confirmed)) == []
    one_shot = conversation(
        "Restart the web service on host 3.", [("call", ("restart_service", True))], "Restarted."
    )
    assert unconfirmed_changes(window_of(one_shot)) == []


def test_two_kinds_of_trouble_fail_the_run_one_does_not() -> None:
    one = conversation(
        "Change my flight to Friday.",
        [
            ("user", "Friday morning please."),
            ("call", ("update_reservation", True)),
        ],
        "Your flight now leaves Friday at 09:00; reservation ABC123 is updated.",
    )
    verdict = rule_decision(window_of(one))
    assert verdict.evaluation.passed
    # the same run, far longer than this agent's runs usually are: a second kind of trouble
    two = conversation(
        "Change my flight to Friday.",
        [
            ("user", "Friday morning please."),
            *[("call", (f"get_flight_{i}", True)) for i in range(12)],
            ("call", ("update_reservation", True)),
        ],
        "Your flight now leaves Friday at 09:00; reservation ABC123 is updated.",
    )
    usual = Norms("agent", runs=60, min_runs=50, measures={"tool_calls": Norm(2, 3, 4, 5)})
    verdict_two = judge.judge(window_of(two), norms=usual)
    assert verdict_two.success and not verdict_two.incomplete
    assert verdict_two.rule_score < 60
    fired = dict(verdict_two.findings)
    assert "without a go-ahead" in fired["compound_trouble"]
    assert "above this agent's usual" in fired["compound_trouble"]
    # without the agent's normal (still learning), the length alone says nothing
    assert judge.judge(window_of(two)).rule_score >= 60
