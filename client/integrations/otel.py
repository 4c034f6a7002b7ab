"""An OpenTelemetry span processor that turns an agent's GenAI spans into tracejudge events in
the agent's own process: no collector and no `tracejudge otel` receiver needed.

    from opentelemetry.sdk.trace import TracerProvider
    from tracejudge.client import Tracer
    from tracejudge.client.integrations.otel import TracejudgeSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(TracejudgeSpanProcessor(Tracer("kafka:9092")))

Spans map as `tracejudge otel` maps them (client/otel_mapping.py): a trace is one request,
its local root span (no parent, or a remote one) ends it, tools are tool calls, model calls
are reasoning steps with their token usage. Each step's `actor` is the agent it ran under
(`gen_ai.agent.name` on the span or its nearest agent span above it): the processor notes
every span as it starts, so an agent span still open is known to the steps that end inside it.
`on_end` hands events to the tracer's buffer and returns: it never blocks the span's thread and
never raises into it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from tracejudge.client.otel_conventions import agent_name_of, role_of
from tracejudge.client.otel_mapping import SpanInfo, TraceNotes, events_of

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span

    from tracejudge.client.tracer import AsyncTracer, Tracer

log = logging.getLogger("tracejudge.client")


class TracejudgeSpanProcessor(SpanProcessor):
    def __init__(
        self,
        tracer: Tracer | AsyncTracer,
        *,
        capture_content: bool = False,
        request_end: str = "local_root",
    ) -> None:
        """`capture_content`: read prompts, answers and tool arguments from the spans (off by
        default, as OpenTelemetry keeps message content opt-in)."""
        self.tracer = tracer
        self.capture_content = capture_content
        self.request_end = request_end
        # the open spans of each trace (where a step's actor is) and what the trace said
        self.notes = TraceNotes()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            context, parent = span.context, span.parent
            if context is not None:
                self.notes.note(
                    format(context.trace_id, "032x"),
                    format(context.span_id, "016x"),
                    format(parent.span_id, "016x") if parent else "",
                    _LiveAgent(span),  # an agent's name may be set after its span started
                )
        except Exception:  # a span we cannot read: the agent goes on
            log.exception("tracejudge: could not read span %r", getattr(span, "name", "?"))

    def on_end(self, span: ReadableSpan) -> None:
        try:
            info = span_info(span)
            # its agent name as it ended, in place of the open span
            self.notes.note_span(info)
            for event in events_of(info, self.capture_content, self.request_end, self.notes):
                self.tracer.emit(event)
        except Exception:  # a span we cannot read: the agent goes on
            log.exception("tracejudge: could not read span %r", getattr(span, "name", "?"))

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        # the sender's own flush: blocking, as the SDK expects here, for either tracer
        return self.tracer._sender.flush(timeout_millis / 1000)


class _LiveAgent:
    """The agent an open span stands for, read from its attributes when asked."""

    def __init__(self, span: ReadableSpan) -> None:
        self.span = span

    def __call__(self) -> str | None:
        attributes = self.span.attributes or {}
        return agent_name_of(attributes, self.span.name, role_of(attributes, self.span.name))


def span_info(span: ReadableSpan) -> SpanInfo:
    context, parent = span.context, span.parent
    attributes: dict[str, Any] = dict(span.attributes or {})
    return SpanInfo(
        trace_id=format(context.trace_id, "032x") if context else "0" * 32,
        span_id=format(context.span_id, "016x") if context else "",
        parent_span_id=format(parent.span_id, "016x") if parent else "",
        name=span.name,
        start_ns=span.start_time or 0,
        end_ns=span.end_time or span.start_time or 0,
        attributes=attributes,
        status_code=span.status.status_code.value if span.status else 0,
        status_message=(span.status.description or "") if span.status else "",
        parent_remote=bool(parent and parent.is_remote),
        events=tuple(
            (e.name, dict(e.attributes or {})) for e in span.events if e.name == "exception"
        ),
        resource=dict(span.resource.attributes) if span.resource else {},
        scope=span.instrumentation_scope.name if span.instrumentation_scope else "",
    )
