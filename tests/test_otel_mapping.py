"""GenAI spans to contract events: roots end requests, tools are calls, content is opt-in."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.instrumentations import batches
from tests.instrumentations import events as events_from
from tracejudge.client.otel_mapping import SpanInfo, TraceNotes, events_of
from tracejudge.models.events import parse_event

TRACE = "0af7651916cd43dd8448eb211c80319c"


def span(name: str, attributes: dict[str, str], parent: str = "", status: int = 0) -> SpanInfo:
    return SpanInfo(
        TRACE,
        name.replace(" ", "")[:16],
        parent,
        name,
        1_000_000_000,
        2_500_000_000,
        attributes,
        status,
        "boom" if status == 2 else "",
    )


MESSAGES_IN = json.dumps(
    [{"role": "user", "parts": [{"type": "text", "content": "Refund order 7"}]}]
)
MESSAGES_OUT = json.dumps(
    [{"role": "assistant", "parts": [{"type": "text", "content": "Done: 20 EUR"}]}]
)


def test_a_root_agent_span_starts_and_ends_the_request_without_content_by_default() -> None:
    root = span(
        "invoke_agent bot",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "bot",
            "gen_ai.input.messages": MESSAGES_IN,
            "gen_ai.output.messages": MESSAGES_OUT,
        },
    )
    started, final = events_of(root, capture_content=False)
    assert started["type"] == "task_started" and final["type"] == "final_response"
    assert started["request_id"] == final["request_id"] == f"otel-{TRACE}"
    assert "Refund" not in json.dumps([started, final])  # the content stayed out
    started, final = events_of(root, capture_content=True)
    assert started["goal"] == "Refund order 7" and final["output"] == "Done: 20 EUR"
    for event in (started, final):
        parse_event(json.dumps({k: v for k, v in event.items() if v is not None}).encode())


def test_tool_and_model_spans_are_steps_ordered_by_start_and_failures_carry_their_reason() -> None:
    [call] = events_of(
        span(
            "execute_tool refund",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund"},
            parent="root",
            status=2,
        ),
        capture_content=False,
    )
    assert (call["type"], call["tool"], call["success"], call["error"]) == (
        "tool_call",
        "refund",
        False,
        "boom",
    )
    assert call["step_index"] == 1_000_000 and call["latency_ms"] == 1500.0
    [thought] = events_of(
        span(
            "chat gpt-4o",
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
            parent="root",
        ),
        capture_content=False,
    )
    assert thought["type"] == "reasoning_step" and thought["intent_summary"] == "chat gpt-4o"
    assert events_of(span("GET /orders", {}, parent="root"), capture_content=False) == []
    [tool] = events_of(
        span("lookup", {"openinference.span.kind": "TOOL", "tool.name": "lookup"}, parent="root"),
        capture_content=False,
    )
    assert tool["tool"] == "lookup"


def test_a_span_with_a_remote_parent_ends_the_request_unless_only_true_roots_may() -> None:
    behind_gateway = SpanInfo(
        TRACE, "agent01", "gateway1", "invoke_agent bot", 1_000, 2_000, {}, 0, "", True
    )
    kinds = [e["type"] for e in events_of(behind_gateway, capture_content=False)]
    assert kinds == ["task_started", "final_response"]
    as_root_only = events_of(behind_gateway, capture_content=False, request_end="root")
    assert [e["type"] for e in as_root_only] == ["reasoning_step"]  # a step of a longer trace
    # a local parent (or an SDK that does not say): a nested span, not the end
    nested = SpanInfo(TRACE, "agent02", "agent01", "invoke_agent helper", 1_000, 2_000, {}, 0, "")
    assert [e["type"] for e in events_of(nested, capture_content=False)] == ["reasoning_step"]


def test_a_model_call_keeps_its_usage() -> None:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o-2024-08-06",
        "gen_ai.usage.input_tokens": 1200,
        "gen_ai.usage.output_tokens": 85,
    }
    [step] = events_of(span("chat gpt-4o", attrs, parent="root"), capture_content=False)  # type: ignore[arg-type]
    event = parse_event(step)
    assert event.type == "reasoning_step" and event.usage is not None
    assert (event.usage.model, event.usage.input_tokens, event.usage.output_tokens) == (
        "gpt-4o-2024-08-06",
        1200,
        85,
    )
    assert event.usage.latency_ms == 1500.0


def test_without_content_an_answer_says_which_side_left_it_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Content the receiver does not read, content the instrumentation never captured, and
    the log line naming what sent the spans, once per instrumentation."""
    recorded = batches(Path(__file__).parent / "data" / "otel" / "pydantic_ai-v6-ok.b64.gz")
    caplog.set_level(logging.INFO, logger="tracejudge.streams.receiver.receiver")
    off = events_from(recorded, capture_content=False)
    [final] = [e for e in off if e["type"] == "final_response"]
    assert "TRACEJUDGE_OTEL_CAPTURE_CONTENT is off" in final["output"]
    said = json.dumps(off)
    assert "Refund order 7" not in said and "order_id" not in said  # no content left in
    assert [c["tool"] for c in off if c["type"] == "tool_call"] == ["get_order", "refund"]
    logged = [r.getMessage() for r in caplog.records if "conventions read" in r.getMessage()]
    assert logged == [
        "spans from pydantic-ai (sdk opentelemetry 1.45.2): conventions read: genai; "
        "content not read (TRACEJUDGE_OTEL_CAPTURE_CONTENT=false)"
    ]
    bare = span("invoke_agent bot", {"gen_ai.operation.name": "invoke_agent"})
    [_, final] = events_of(bare, capture_content=True)
    assert "the instrumentation did not capture message content" in final["output"]


def test_hostile_messages_are_read_in_bounded_time_and_never_raise() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    flat = {f"llm.input_messages.{i}.message.content": "x" for i in range(20_000)}
    flat["llm.input_messages.99999999999.message.role"] = "user"
    for attributes in (
        {"gen_ai.operation.name": "chat", "gen_ai.input.messages": deep},
        {"gen_ai.operation.name": "chat", "gen_ai.output.messages": "{" * 50_000},
        {"openinference.span.kind": "LLM", **flat},
        {"openinference.span.kind": "AGENT", "output.value": "Action: x\nAction Input: " * 9999},
        {"openinference.span.kind": "TOOL", "input.value": deep, "output.value": deep},
    ):
        for event in events_of(span("x", attributes, parent="root"), capture_content=True):
            parse_event(json.dumps({k: v for k, v in event.items() if v is not None}))


def test_what_open_traces_said_is_bounded_whatever_never_ends() -> None:
    """Traces whose root never comes (an instrumentor that loses its run span) are forgotten,
    oldest first, once the notes hold `limit` spans and calls."""
    notes = TraceNotes(limit=1_000)
    asks = json.dumps(
        [
            {
                "role": "assistant",
                "parts": [{"type": "tool_call", "id": f"c{i}", "name": "t"} for i in range(60)],
            }
        ]
    )
    for n in range(500):
        trace = f"{n:032x}"
        model = SpanInfo(
            trace, f"{n:016x}", "parent", "chat", 1, 2,
            {"gen_ai.operation.name": "chat", "gen_ai.output.messages": asks}, 0, "",
        )  # fmt: skip
        notes.note_span(model)
        events_of(model, capture_content=True, notes=notes)
    assert sum(t.size for t in notes._traces.values()) <= 1_000 + 64
    assert f"{499:032x}" in notes._traces and f"{0:032x}" not in notes._traces
