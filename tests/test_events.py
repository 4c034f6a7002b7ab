from __future__ import annotations

import json

import pytest

from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import (
    LONG_TEXT_LIMIT,
    SUMMARY_LIMIT,
    FinalResponse,
    ReasoningStep,
    TaskStarted,
    ToolCall,
    parse_event,
)


def test_tool_call_round_trip_and_derived_event_id() -> None:
    event = parse_event(
        json.dumps(
            {
                "type": "tool_call",
                "request_id": "r1",
                "step_index": 3,
                "tool": "search",
                "success": True,
                "latency_ms": 12,
            }
        ).encode()
    )
    assert isinstance(event, ToolCall)
    assert event.resolved_event_id() == "r1:tool_call:3"
    final = {"type": "final_response", "request_id": "r1", "output": ""}
    assert parse_event(final).resolved_event_id() == "r1:final_response:-"
    given = parse_event({**final, "event_id": "e9"})
    assert given.resolved_event_id() == "e9"


def test_unknown_fields_are_dropped_so_no_chain_of_thought_is_kept() -> None:
    event = parse_event(
        {
            "type": "reasoning_step",
            "request_id": "r",
            "step_index": 0,
            "phase": "plan",
            "intent_summary": "plan the booking",
            "chain_of_thought": "secret long thinking",
        }
    )
    assert isinstance(event, ReasoningStep)
    assert "chain_of_thought" not in event.model_dump()
    assert "secret" not in event.model_dump_json()


def test_long_texts_are_clipped_and_flagged() -> None:
    event = parse_event(
        {
            "type": "task_started",
            "request_id": "r",
            "goal": "g" * (LONG_TEXT_LIMIT + 500),
        }
    )
    assert isinstance(event, TaskStarted)
    assert len(event.goal) == LONG_TEXT_LIMIT and "…[clipped 5" in event.goal  # head and tail
    assert event.clipped == ["goal"]
    call = parse_event(
        {
            "type": "tool_call",
            "request_id": "r",
            "step_index": 1,
            "tool": "t",
            "success": False,
            "error": "e" * 5000,
            "result_preview": "short",
        }
    )
    assert isinstance(call, ToolCall)
    assert call.error is not None and len(call.error) == SUMMARY_LIMIT
    assert call.clipped == ["error"]
    final = parse_event({"type": "final_response", "request_id": "r", "output": "o" * 9000})
    assert isinstance(final, FinalResponse) and len(final.output) == LONG_TEXT_LIMIT


@pytest.mark.parametrize(
    ("raw", "code", "mentions"),
    [
        (b"nope", "not_json", "not JSON"),
        (b"\xff\xfe", "not_utf8", "UTF-8"),
        (b"[1, 2]", "not_object", "list"),
        (b'{"request_id": "r"}', "missing_type", "type"),
        (b'{"type": "telepathy", "request_id": "r"}', "unknown_type", "telepathy"),
        (
            b'{"type": "tool_call", "step_index": 1, "tool": "t", "success": true}',
            "invalid_fields",
            "request_id",
        ),
        (
            b'{"type": "tool_call", "request_id": "r", "step_index": "1", "tool": "t", '
            b'"success": "true"}',
            "invalid_fields",
            "success",
        ),
        (
            b'{"type": "tool_call", "request_id": "r", "tool": "t", "success": true}',
            "invalid_fields",
            "step_index",
        ),
        (
            b'{"type": "reasoning_step", "request_id": "r", "step_index": 0, "phase": "dream"}',
            "invalid_fields",
            "phase",
        ),
        (
            b'{"type": "reasoning_step", "request_id": "r", "step_index": 0, "phase": "plan", '
            b'"confidence": 150}',
            "invalid_fields",
            "confidence",
        ),
        (b'{"type": "final_response", "request_id": ""}', "invalid_fields", "request_id"),
        # an answer sent under another name is refused, not judged as an empty answer
        (
            b'{"type": "final_response", "request_id": "r", "text": "done"}',
            "invalid_fields",
            "output: Field required",
        ),
        (
            b'{"type": "final_response", "request_id": "r", "validation": {"verdict": "maybe"}}',
            "invalid_fields",
            "verdict",
        ),
    ],
)
def test_bad_input_says_why(raw: bytes, code: str, mentions: str) -> None:
    with pytest.raises(InvalidEvent) as caught:
        parse_event(raw)
    assert caught.value.code == code
    assert mentions in str(caught.value)


def test_request_id_length_limit() -> None:
    parse_event({"type": "final_response", "request_id": "r" * 256, "output": ""})
    with pytest.raises(InvalidEvent):
        parse_event({"type": "final_response", "request_id": "r" * 257, "output": ""})


@pytest.mark.parametrize(
    ("given", "read"), [(0.85, 0.85), (85, 0.85), (100, 1.0), (1, 1.0), (0, 0)]
)
def test_a_percentage_confidence_is_read_as_its_fraction(given: float, read: float) -> None:
    raw = {"type": "reasoning_step", "request_id": "r", "step_index": 0, "phase": "plan"}
    event = parse_event(json.dumps({**raw, "confidence": given}).encode())
    assert isinstance(event, ReasoningStep) and event.confidence == pytest.approx(read)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type": "tool_call", "request_id": "r", "step_index": 1, "tool": "t", "success": true, '
        b'"ts": 1.5}',
        # what orjson refuses and the standard library reads: the same outcome either way
        b'{"type": "tool_call", "request_id": "r", "step_index": 1, "tool": "t", "success": true, '
        b'"ts": NaN}',
        b'{"type": "tool_call", "request_id": "r", "tool": "t", "success": true, '
        b'"step_index": 1180591620717411303424}',
        b'{"type": "final_response", "request_id": "r", "output": "\\ud800 alone"}',
        b'{"type": "final_response", "request_id": "r", "output": "\xff"}',
        b'{"type": "final_response", "request_id": "r", "output": ',
        b"[1, 2]",
        b'{"request_id": "r"}',
    ],
)
def test_events_read_as_the_standard_library_reads_them(raw: bytes) -> None:
    """pydantic's JSON reader goes first (a quarter of the time); the standard library's is
    the contract: what it reads (a lone surrogate replaced by U+FFFD, which UTF-8 can carry),
    and how it words what it refuses."""

    def stdlib(value: bytes) -> object:
        try:
            return json.loads(value.decode("utf-8").replace("\\ud800", "\ufffd"))
        except UnicodeDecodeError:
            return "not_utf8"
        except json.JSONDecodeError:
            return "not_json"

    def outcome(value: object) -> object:
        try:
            return parse_event(value)  # type: ignore[arg-type]
        except InvalidEvent as exc:
            return exc.code, exc.reason

    decoded = stdlib(raw)
    expected = outcome(decoded) if not isinstance(decoded, str) else decoded
    got = outcome(raw)
    got = got[0] if isinstance(got, tuple) and isinstance(decoded, str) else got
    assert repr(got) == repr(expected)  # repr: NaN equals itself there
