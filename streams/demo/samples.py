"""Sample traces: the four success/incomplete cases and an idle timeout.

Used by the demo and the tests; each trace is a list of contract events (dicts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SampleTrace:
    name: str
    request_id: str
    events: list[dict[str, Any]]
    expect_success: bool
    expect_incomplete: bool
    expect_closed_by: str = "final_response"


def _tool(
    rid: str, i: int, tool: str, ok: bool, args: str, result: str = "", error: str = ""
) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "request_id": rid,
        "step_index": i,
        "tool": tool,
        "args_summary": args,
        "success": ok,
        "result_preview": result,
        "error": error or None,
    }


def _start(rid: str, goal: str, planned: list[str], round_: int = 0) -> dict[str, Any]:
    return {
        "type": "task_started",
        "request_id": rid,
        "step_index": 0,
        "goal": goal,
        "planned_steps": planned,
        "agent_name": "demo-agent",
        "reflection_round": round_,
    }


def _final(rid: str, i: int, output: str) -> dict[str, Any]:
    return {"type": "final_response", "request_id": rid, "step_index": i, "output": output}


def _booked(rid: str, reflection_round: int) -> SampleTrace:
    return SampleTrace(
        "success, complete",
        rid,
        [
            _start(
                rid,
                "Book a flight from New York to Seattle on May 20.",
                ["search_flights", "book_reservation"],
                reflection_round,
            ),
            {
                "type": "reasoning_step",
                "request_id": rid,
                "step_index": 1,
                "phase": "plan",
                "intent_summary": "Find flights, then book the cheapest economy seat.",
                "action": "search_flights",
            },
            _tool(
                rid,
                2,
                "search_flights",
                True,
                '{"from":"JFK","to":"SEA","date":"05-20"}',
                "3 flights, cheapest UA123 $320",
            ),
            _tool(
                rid,
                3,
                "book_reservation",
                True,
                '{"flight":"UA123","cabin":"economy"}',
                "reservation ABC123 confirmed",
            ),
            _final(
                rid,
                4,
                "Booked UA123 from JFK to SEA on May 20 in economy; reservation "
                "ABC123 is confirmed and $320 was charged to your card.",
            ),
        ],
        expect_success=True,
        expect_incomplete=False,
    )


def _booked_unconfirmed(rid: str, reflection_round: int) -> SampleTrace:
    return SampleTrace(
        "success, steps remain",
        rid,
        [
            _start(
                rid,
                "Book a flight to Seattle on May 20 and email me the confirmation.",
                ["search_flights", "book_reservation", "send_confirmation_email"],
                reflection_round,
            ),
            _tool(rid, 1, "search_flights", True, '{"to":"SEA","date":"05-20"}', "UA123 $320"),
            _tool(rid, 2, "book_reservation", True, '{"flight":"UA123"}', "ABC123"),
            _final(
                rid,
                3,
                "Your flight UA123 is booked (reservation ABC123). Remaining "
                "steps: send the confirmation email to you.",
            ),
        ],
        expect_success=True,
        expect_incomplete=True,
    )


def _refund_failed(rid: str, reflection_round: int) -> SampleTrace:
    return SampleTrace(
        "failed, incomplete",
        rid,
        [
            _start(
                rid,
                "Refund order 8812 to the original card.",
                ["lookup_order", "refund_payment"],
                reflection_round,
            ),
            _tool(rid, 1, "lookup_order", True, '{"order":"8812"}', "order 8812, $54.90"),
            _tool(
                rid,
                2,
                "refund_payment",
                False,
                '{"order":"8812","amount":54.9}',
                error="payment gateway timeout",
            ),
            _final(
                rid,
                3,
                "I could not issue the refund because the payment gateway "
                "timed out. The refund of $54.90 still needs to be processed.",
            ),
        ],
        expect_success=False,
        expect_incomplete=True,
    )


def _sms_failed(rid: str, reflection_round: int) -> SampleTrace:
    return SampleTrace(
        "failed, complete",
        rid,
        [
            _start(
                rid,
                "Change my address to 12 Main St, Springfield.",
                ["get_user_details", "update_address"],
                reflection_round,
            ),
            _tool(rid, 1, "get_user_details", True, '{"user":"mia_li"}', "user found"),
            _tool(rid, 2, "update_address", True, '{"street":"12 Main St"}', "updated"),
            _tool(
                rid,
                3,
                "send_sms_notification",
                False,
                '{"user":"mia_li"}',
                error="SMS provider rejected the number",
            ),
            _final(
                rid,
                4,
                "Your address is now 12 Main St, Springfield; every future "
                "order ships there. The SMS notification could not be delivered.",
            ),
        ],
        expect_success=False,
        expect_incomplete=False,
    )


def _went_quiet(rid: str, reflection_round: int) -> SampleTrace:
    return SampleTrace(
        "went quiet (idle timeout)",
        rid,
        [
            _start(rid, "Cancel reservation XYZ789.", ["cancel_reservation"], reflection_round),
            _tool(rid, 1, "get_reservation_details", True, '{"id":"XYZ789"}', "found"),
        ],
        expect_success=True,
        expect_incomplete=True,
        expect_closed_by="idle_timeout",
    )


def sample_traces(run_id: str, reflection_round: int = 0) -> list[SampleTrace]:
    """The five sample traces, request ids prefixed by `run_id`."""
    return [
        _booked(f"{run_id}:booked", reflection_round),
        _booked_unconfirmed(f"{run_id}:booked-unconfirmed", reflection_round),
        _refund_failed(f"{run_id}:refund-failed", reflection_round),
        _sms_failed(f"{run_id}:sms-failed", reflection_round),
        _went_quiet(f"{run_id}:went-quiet", reflection_round),
    ]
