"""OpenTelemetry GenAI spans to contract events, one span at a time (no buffering).

A trace is one request (`otel-<trace id>`). Its local root span (no parent, or a parent in
another process: an agent behind an instrumented gateway; `invoke_agent` in the GenAI semantic
conventions) gives the task and, as it ends last here, the final response that ends the
request (with `request_end="root"`, only a span with no parent does). `execute_tool` spans are
tool calls; model calls (`chat`, `text_completion`, `generate_content`) and nested agents are
reasoning steps, a model call's usage (`gen_ai.usage.*_tokens`, the model) kept on its step.
Steps are ordered by their start time (the step index is the start in microseconds), so spans
may arrive in any order. Message content is read only when `capture_content` is set, as the
conventions make it opt-in. OpenInference's span kinds (AGENT, TOOL, LLM, CHAIN) and attribute
names are read too.

A step's `actor` (who took it, in a multi-agent run) is the span's own `gen_ai.agent.name`, or
its nearest ancestor's that has one (the agent span a tool or model call runs under), when the
spans above it were noted in `AgentNames`: the span processor notes each span as it starts, the
receiver a whole export batch before mapping it. A child span ends, and is exported, before its
parent: an ancestor that comes in a later batch is not known yet, and the step then has no
actor unless it names its own agent. `agent_name` is the span's own attribute alone.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tracejudge.models.events import LONG_TEXT_LIMIT, SUMMARY_LIMIT, clip

HEX_TRACE = re.compile(r"[0-9a-f]{32}")
HEX_SPAN = re.compile(r"[0-9a-f]{16}")
STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR
MODEL_CALLS = ("chat", "text_completion", "generate_content", "embeddings")


@dataclass(frozen=True)
class SpanInfo:
    trace_id: str  # hex
    span_id: str
    parent_span_id: str  # "" for a root span
    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    status_code: int
    status_message: str
    parent_remote: bool = False  # the SDK said the parent span is in another process

    def ends_request(self, request_end: str) -> bool:
        return not self.parent_span_id or (request_end == "local_root" and self.parent_remote)

    @property
    def operation(self) -> str:
        op = self.attributes.get("gen_ai.operation.name")
        if isinstance(op, str) and op:
            return op
        kind = str(self.attributes.get("openinference.span.kind", "")).upper()
        by_kind = {"AGENT": "invoke_agent", "TOOL": "execute_tool", "LLM": "chat"}
        return by_kind.get(kind, self.name.split(" ", 1)[0])

    @property
    def failed(self) -> bool:
        return self.status_code == STATUS_ERROR or bool(self.attributes.get("error.type"))

    @property
    def error(self) -> str | None:
        if not self.failed:
            return None
        return self.status_message or str(self.attributes.get("error.type") or "error")


def request_id(trace_id: str) -> str:
    return f"otel-{trace_id}"


def agent_name_of(attributes: Mapping[str, Any]) -> str | None:
    name = attributes.get("gen_ai.agent.name")
    return name[:256] if isinstance(name, str) and name else None


# a span's agent name, or the attributes of an open span, read when asked (set after its start)
_Agent = str | Mapping[str, Any] | None


class AgentNames:
    """Which agent each span belongs to: its own `gen_ai.agent.name`, or its nearest noted
    ancestor's. Spans are noted with their parent as they are seen; a trace is forgotten when
    its request ends, and the oldest traces beyond `limit` spans. Thread-safe (a span
    processor is called on the threads that end spans)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._traces: dict[str, dict[str, tuple[str, _Agent]]] = {}  # span -> parent, agent
        self._count = 0
        self._lock = threading.Lock()

    @classmethod
    def of(cls, spans: Iterable[SpanInfo]) -> AgentNames:
        """The names of a batch of spans (the receiver's: one export request)."""
        names = cls()
        for span in spans:
            names.note(span.trace_id, span.span_id, span.parent_span_id, span.attributes)
        return names

    def note(
        self,
        trace_id: str,
        span_id: str,
        parent_span_id: str,
        attributes: Mapping[str, Any],
        live: bool = False,
    ) -> None:
        """`live`: `attributes` are an open span's, still being written: read when a step
        below asks (kept until the span is noted again), not now."""
        agent = attributes if live else agent_name_of(attributes)
        with self._lock:
            spans = self._traces.setdefault(trace_id, {})
            if span_id not in spans:
                self._count += 1
            spans[span_id] = (parent_span_id, agent)
            while self._count > self.limit and len(self._traces) > 1:
                oldest = next(t for t in self._traces if t != trace_id)
                self._count -= len(self._traces.pop(oldest))

    def forget(self, trace_id: str) -> None:
        with self._lock:
            self._count -= len(self._traces.pop(trace_id, {}))

    def actor_of(self, span: SpanInfo) -> str | None:
        own = agent_name_of(span.attributes)
        if own is not None:
            return own
        with self._lock:
            spans = self._traces.get(span.trace_id, {})
            above = span.parent_span_id
            for _ in range(64):  # a cycle or a deep chain ends the search
                if not above or above not in spans:
                    return None
                above, agent = spans[above]
                name = agent if agent is None or isinstance(agent, str) else agent_name_of(agent)
                if name is not None:
                    return name
        return None


def events_of(
    span: SpanInfo,
    capture_content: bool,
    request_end: str = "local_root",
    agents: AgentNames | None = None,
) -> list[dict[str, Any]]:
    """The contract events one finished span stands for. `agents`: the spans seen so far, to
    find a step's actor above it (without: the span's own agent name only)."""
    rid = request_id(span.trace_id)
    a = span.attributes
    common: dict[str, Any] = {"request_id": rid, "ts": span.end_ns / 1e9}
    for key, name in (
        ("gen_ai.conversation.id", "session_key"),
        ("gen_ai.agent.name", "agent_name"),
        ("gen_ai.agent.version", "agent_version"),
    ):
        if isinstance(a.get(key), str) and a[key]:
            common[name] = a[key][: 128 if name == "agent_version" else 256]
    step = span.start_ns // 1000
    op = span.operation
    actor = agent_name_of(a) if agents is None else agents.actor_of(span)
    if span.ends_request(request_end):
        return _root(span, common, capture_content, actor)
    if op == "execute_tool":
        return [
            {
                **common,
                "actor": actor,
                "type": "tool_call",
                "event_id": f"{rid}:{span.span_id}",
                "step_index": step,
                "tool": str(a.get("gen_ai.tool.name") or a.get("tool.name") or span.name)[:256],
                "success": not span.failed,
                "error": _clip(span.error),
                "latency_ms": max(0.0, (span.end_ns - span.start_ns) / 1e6),
                "args_summary": _clip(_content(a, ("gen_ai.tool.call.arguments", "input.value")))
                if capture_content
                else None,
                "result_preview": _clip(_content(a, ("gen_ai.tool.call.result", "output.value")))
                if capture_content
                else None,
            }
        ]
    if op in MODEL_CALLS or op in ("invoke_agent", "create_agent"):
        model = a.get("gen_ai.response.model") or a.get("gen_ai.request.model") or ""
        what = (
            f"{op} {model}".strip()
            if op in MODEL_CALLS
            else f"{op} {a.get('gen_ai.agent.name', '')}"
        )
        said = _content(a, ("gen_ai.output.messages", "output.value")) if capture_content else None
        return [
            {
                **common,
                "actor": actor,
                "type": "reasoning_step",
                "event_id": f"{rid}:{span.span_id}",
                "step_index": step,
                "phase": "synthesis" if op in MODEL_CALLS else "plan",
                "intent_summary": _clip(said) or what.strip(),
                "error": _clip(span.error),
                "usage": _usage(span) if op in MODEL_CALLS else None,
            }
        ]
    return []  # other spans (HTTP, database) are not steps of the agent


def _root(
    span: SpanInfo, common: dict[str, Any], capture_content: bool, actor: str | None
) -> list[dict[str, Any]]:
    rid, a = common["request_id"], span.attributes
    agent = str(a.get("gen_ai.agent.name") or span.name)
    asked = _content(a, ("gen_ai.input.messages", "input.value")) if capture_content else None
    answer = _content(a, ("gen_ai.output.messages", "output.value")) if capture_content else None
    goal = asked or str(a.get("gen_ai.agent.description") or f"run of {agent}")
    if span.failed:
        output = f"{agent} failed: {span.error}"
    else:
        # without content capture the answer itself is not known: say what ended, not "done"
        output = answer or f"{agent} finished its run (answer not captured: content is opt-in)"
    return [
        {
            **common,
            "type": "task_started",
            "event_id": f"{rid}:start",
            "step_index": 0,
            "goal": clip(goal, LONG_TEXT_LIMIT),
            "trace_id": span.trace_id if HEX_TRACE.fullmatch(span.trace_id) else None,
            "span_id": span.span_id if HEX_SPAN.fullmatch(span.span_id) else None,
        },
        {
            **common,
            "actor": actor,
            "type": "final_response",
            "event_id": f"{rid}:final",
            "step_index": span.end_ns // 1000,
            "output": clip(output, LONG_TEXT_LIMIT),
        },
    ]


def _usage(span: SpanInfo) -> dict[str, Any] | None:
    """A model call's usage from the GenAI attributes (OpenInference's names too)."""
    a = span.attributes
    tokens_in = a.get("gen_ai.usage.input_tokens", a.get("llm.token_count.prompt"))
    tokens_out = a.get("gen_ai.usage.output_tokens", a.get("llm.token_count.completion"))
    model = (
        a.get("gen_ai.response.model") or a.get("gen_ai.request.model") or a.get("llm.model_name")
    )
    usage = {
        "model": str(model)[:256] if model else None,
        "input_tokens": tokens_in if isinstance(tokens_in, int) and tokens_in >= 0 else None,
        "output_tokens": tokens_out if isinstance(tokens_out, int) and tokens_out >= 0 else None,
        "latency_ms": max(0.0, (span.end_ns - span.start_ns) / 1e6),
    }
    return {k: v for k, v in usage.items() if v is not None}


def _content(attributes: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    """Text of the first content attribute present: GenAI messages (JSON: parts with text)
    or OpenInference's input/output values."""
    for key in keys:
        value = attributes.get(key)
        if value in (None, ""):
            continue
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except (ValueError, RecursionError):
                return value
            return _texts(parsed) or value
        return _texts(value) or str(value)
    return None


def _texts(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if isinstance(value.get("content"), str):
            return str(value["content"])
        return " ".join(_texts(v) for k, v in value.items() if k in ("parts", "content", "text"))
    if isinstance(value, list):
        return " ".join(t for t in (_texts(v) for v in value) if t)
    return ""


def _clip(text: str | None) -> str | None:
    return None if text is None else clip(text, SUMMARY_LIMIT)
