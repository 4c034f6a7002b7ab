"""OpenTelemetry spans to contract events, as the instrumentations teams use write them.

A trace is one request (`otel-<trace id>`). Its local root span (no parent, or a parent in
another process: an agent behind an instrumented gateway) ends it: it gives the task and, as it
ends last, the final response. What each span is comes from whichever convention wrote it
(client/otel_conventions.py: the GenAI conventions, OpenInference, OpenLLMetry):
- a tool span is a tool call (failed when its span ended in ERROR or its result says so, with
  the error's text from the status, the `exception` event or `error.type`); a framework's
  final-answer pseudo-tool (smolagents' `final_answer`) is the answer, not a call;
- a model call is a reasoning step with its usage; when the trace has no tool spans (an
  instrumented model client in a hand-written loop), the tool calls are read from the model
  calls' messages: each call's input answers the calls of the one before, so only the tool
  answers after its last assistant message are new;
- a nested agent is a reasoning step; a framework's wrapper spans (chains, graph nodes, steps)
  and spans that are not the agent's (HTTP, database) are no steps.
The root's task, answer and agent are its own where it has them, else what the trace said
below it (`TraceNotes`): the outermost agent span's, the first model call's request and the
last model call's words, the resource's `service.name`. A root that ended in ERROR is a run
that crashed: its final response carries the error, and the run is judged failed.

Message content is read only when `capture_content` is set (OpenTelemetry keeps it opt-in);
without it, or when the trace carries none, the final response says which. Steps are ordered
by their start time (the step index is the start in microseconds), so spans may arrive in any
order.

A step's `actor` is its span's own agent, or its nearest noted ancestor's: the span processor
notes each span as it starts, the receiver a whole export batch before mapping it. A child span
ends, and is exported, before its parent: an ancestor that comes in a later batch is not known
yet, and the step then has no actor unless it names its own agent.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tracejudge.client.otel_conventions import (
    AGENT,
    CHAIN,
    FINAL_ANSWER_TOOLS,
    MODEL,
    TOOL,
    agent_name_of,
    answer_of,
    arguments_text,
    failed_answer,
    final_of,
    first_of,
    goal_of,
    has_content,
    own_agent_name,
    raw_input,
    result_text,
    role_of,
    root_name_as_agent,
    run_steps,
    service_name,
    task_text,
    wrapped_agent_name,
)
from tracejudge.client.otel_messages import (
    Answered,
    Call,
    Message,
    answer_text,
    last_user_text,
    messages,
    new_tool_calls,
)
from tracejudge.models.events import LONG_TEXT_LIMIT, SUMMARY_LIMIT, clip

HEX_TRACE = re.compile(r"[0-9a-f]{32}")
HEX_SPAN = re.compile(r"[0-9a-f]{16}")
MAX_CALLS_NOTED = 10_000  # tool call ids kept per open trace
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
    # (name, attributes) of the span's events: an `exception` event holds a failure's text
    events: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    resource: Mapping[str, Any] = field(default_factory=dict)
    scope: str = ""  # the instrumentation scope's name

    def ends_request(self, request_end: str) -> bool:
        return not self.parent_span_id or (request_end == "local_root" and self.parent_remote)

    @cached_property  # read several times a span: its attributes do not change
    def role(self) -> str:
        return role_of(self.attributes, self.name, self.status_code == STATUS_ERROR)

    @property
    def operation(self) -> str:
        """The GenAI operation this span is (`invoke_agent`, `execute_tool`, `chat`), from
        whichever convention wrote it."""
        op = self.attributes.get("gen_ai.operation.name")
        if isinstance(op, str) and op:
            return op
        return {AGENT: "invoke_agent", TOOL: "execute_tool", MODEL: "chat"}.get(
            self.role, self.name.split(" ", 1)[0]
        )

    @property
    def failed(self) -> bool:
        return self.status_code == STATUS_ERROR or bool(self.attributes.get("error.type"))

    @property
    def error(self) -> str | None:
        """The failure's text: the `exception` event's type and message (the status message
        of some instrumentations is a repr and a traceback), else the status message's first
        line, else `error.type`."""
        if not self.failed:
            return None
        for name, attributes in reversed(self.events):
            if name == "exception":
                kind = str(attributes.get("exception.type") or "").rsplit(".", 1)[-1]
                said = str(attributes.get("exception.message") or "")
                if kind or said:
                    return f"{kind}: {said}" if kind and said else kind or said
        first = self.status_message.strip().split("\n", 1)[0].strip()
        named = _error_type(self.attributes.get("error.type"))
        if first and named and named not in first:
            return f"{named}: {first}"
        return first or named or "error"


def _error_type(value: Any) -> str | None:
    """`error.type` as a name: some instrumentations write a class's repr
    ("<class 'openai.InternalServerError'>")."""
    if not isinstance(value, str) or not value:
        return None
    found = re.fullmatch(r"<class '([\w.]+)'>", value)
    return (found.group(1) if found else value).rsplit(".", 1)[-1][:128]


def request_id(trace_id: str) -> str:
    return f"otel-{trace_id}"


def agent_name_of_span(span: SpanInfo) -> str | None:
    return agent_name_of(span.attributes, span.name, span.role)


@dataclass
class _Said:
    """A text the trace said, and the start of the span that said it."""

    at: int
    text: str


@dataclass
class _Agent:
    """An agent span: its start, the name its attributes give (else None), the name read from
    its span name, what it was asked and what it answered."""

    at: int
    named: str | None
    called: str | None
    goal: str | None
    answer: str | None


@dataclass
class _Trace:
    # span -> (parent, its agent's name, or an open span's handle read when asked)
    spans: dict[str, tuple[str, Any]] = field(default_factory=dict)
    tools: bool = False  # a tool span was seen: tool calls are not read from messages
    content: bool = False  # some span carried message content (read or not)
    agent: _Agent | None = None  # the outermost agent span
    asked: _Said | None = None  # the first model call's request
    said: _Said | None = None  # the last model call's words
    handed: _Said | None = None  # a final-answer pseudo-tool's answer
    named: str | None = None  # the agent a framework's wrapper spans name (LlamaIndex)
    # tool calls the model asked for, by id, and the ids whose answers became steps: for
    # writers that leave the asking message out of the next call's input (openlit)
    calls: dict[str, Call] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)

    @property
    def size(self) -> int:
        """What it holds, as `TraceNotes.limit` counts it."""
        return len(self.spans) + len(self.calls) + len(self.answered)


class TraceNotes:
    """What each open trace said so far that its root needs or a step's actor is: the spans
    with their parents and agents, the outermost agent, the model's first request and last
    words. A trace is forgotten when its request ends, the oldest traces beyond `limit` spans.
    Thread-safe (a span processor is called on the threads that end spans)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._traces: dict[str, _Trace] = {}
        self._count = 0
        self._lock = threading.Lock()

    def _trace(self, trace_id: str) -> _Trace:
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._traces[trace_id] = _Trace()
        return trace

    def note_all(self, spans: Iterable[SpanInfo]) -> None:
        """The spans of a batch (the receiver's: one export request), before any is mapped."""
        for span in spans:
            self.note_span(span)

    def note_span(self, span: SpanInfo) -> None:
        """A finished span: its agent (as it ended), and whether it is a tool or has content."""
        role = span.role
        named = wrapped_agent_name(span.attributes) if role == CHAIN else None
        with self._lock:
            trace = self._trace(span.trace_id)
            trace.tools = trace.tools or role == TOOL
            trace.content = trace.content or has_content(span.attributes)
            trace.named = trace.named or named
        self.note(span.trace_id, span.span_id, span.parent_span_id, agent_name_of_span(span))

    def note(self, trace_id: str, span_id: str, parent_span_id: str, agent: Any) -> None:
        """`agent`: the span's agent name, or a callable giving it when asked (an open span's
        name may be set after its start)."""
        with self._lock:
            spans = self._trace(trace_id).spans
            if span_id not in spans:
                self._count += 1
            spans[span_id] = (parent_span_id, agent)
            self._evict(trace_id)

    def _evict(self, keep: str) -> None:
        """Forget the oldest traces while more than `limit` spans and calls are noted."""
        while self._count > self.limit and len(self._traces) > 1:
            oldest = next(t for t in self._traces if t != keep)
            self._count -= self._traces.pop(oldest).size

    def forget(self, trace_id: str) -> None:
        with self._lock:
            trace = self._traces.pop(trace_id, None)
            if trace is not None:
                self._count -= trace.size

    def actor_of(self, span: SpanInfo) -> str | None:
        own = own_agent_name(span.attributes)
        if own is not None:
            return own
        with self._lock:
            trace = self._traces.get(span.trace_id)
            spans = trace.spans if trace is not None else {}
            above = span.parent_span_id
            for _ in range(64):  # a cycle or a deep chain ends the search
                if not above or above not in spans:
                    return None
                above, agent = spans[above]
                name = agent() if callable(agent) else agent
                if name is not None:
                    return str(name)
        return None

    def has_tools(self, trace_id: str) -> bool:
        with self._lock:
            trace = self._traces.get(trace_id)
            return trace is not None and trace.tools

    def heard(self, trace_id: str) -> _Trace:
        """A copy of what the trace said (for its root)."""
        with self._lock:
            trace = self._traces.get(trace_id)
            if trace is None:
                return _Trace()
            return _Trace(
                tools=trace.tools,
                content=trace.content,
                agent=trace.agent,
                asked=trace.asked,
                said=trace.said,
                handed=trace.handed,
                named=trace.named,
            )

    def agent_ended(self, span: SpanInfo, goal: str | None, answer: str | None) -> None:
        agent = _Agent(
            span.start_ns,
            own_agent_name(span.attributes),
            agent_name_of_span(span),
            _kept(goal),
            _kept(answer),
        )
        with self._lock:
            trace = self._trace(span.trace_id)
            if trace.agent is None or span.start_ns < trace.agent.at:
                trace.agent = agent

    def model_ended(self, span: SpanInfo, asked: str | None, said: str | None) -> None:
        with self._lock:
            trace = self._trace(span.trace_id)
            if asked and (trace.asked is None or span.start_ns < trace.asked.at):
                trace.asked = _Said(span.start_ns, clip(asked, LONG_TEXT_LIMIT))
            if said and (trace.said is None or span.start_ns >= trace.said.at):
                trace.said = _Said(span.start_ns, clip(said, LONG_TEXT_LIMIT))

    def asked_for(self, trace_id: str, calls: list[Call]) -> None:
        with self._lock:
            trace = self._trace(trace_id)
            for call in calls:
                if call.id and call.id not in trace.calls and len(trace.calls) < MAX_CALLS_NOTED:
                    trace.calls[call.id] = call
                    self._count += 1
            self._evict(trace_id)

    def new_answers(self, trace_id: str, answers: list[Message]) -> list[Answered]:
        """The tool answers not made steps yet, each with the call it answers (by id, from
        what the model asked for before)."""
        found = []
        with self._lock:
            trace = self._trace(trace_id)
            for answer in answers:
                if not answer.answers or answer.answers in trace.answered:
                    continue
                if len(trace.answered) < MAX_CALLS_NOTED:
                    trace.answered.add(answer.answers)
                    self._count += 1
                call = trace.calls.get(answer.answers) or Call(
                    answer.answers, answer.answered_tool or "tool", None
                )
                found.append(Answered(call, answer.text))
        return found

    def handed_over(self, span: SpanInfo, answer: str | None) -> None:
        if not answer:
            return
        with self._lock:
            trace = self._trace(span.trace_id)
            if trace.handed is None or span.start_ns >= trace.handed.at:
                trace.handed = _Said(span.start_ns, clip(answer, LONG_TEXT_LIMIT))


def _kept(text: str | None) -> str | None:
    """A text kept for a trace's root: no more than its event can hold."""
    return None if text is None else clip(text, LONG_TEXT_LIMIT)


def events_of(
    span: SpanInfo,
    capture_content: bool,
    request_end: str = "local_root",
    notes: TraceNotes | None = None,
) -> list[dict[str, Any]]:
    """The contract events one finished span stands for. `notes`: what the trace said so far
    (the spans above a step, for its actor; the run's request and answer, for its root):
    without them, each span is read alone."""
    notes = notes if notes is not None else TraceNotes()
    rid = request_id(span.trace_id)
    a = span.attributes
    common: dict[str, Any] = {"request_id": rid, "ts": span.end_ns / 1e9}
    session = first_of(a, ("gen_ai.conversation.id", "session.id"))
    if isinstance(session, str):
        common["session_key"] = session[:256]
    if isinstance(a.get("gen_ai.agent.version"), str) and a["gen_ai.agent.version"]:
        common["agent_version"] = a["gen_ai.agent.version"][:128]
    role = span.role
    actor = notes.actor_of(span)
    is_root = span.ends_request(request_end)
    steps = _steps(span, role, rid, common, actor, capture_content, notes, is_root)
    if is_root:
        root = _root(span, role, common, capture_content, actor, notes)
        return steps + root + _ended(span, root)
    return steps


SESSION_END = "tracejudge.session.end"  # true on a request's root span: its session ends with it


def _ended(span: SpanInfo, root: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A `session_end` after the root's answer, when the root says its session ends with it
    (`tracejudge.session.end`, true) and names the session (`gen_ai.conversation.id` or
    `session.id`): no semantic convention marks a conversation's end, so ours does. It names
    the root's agent, whose session it is."""
    if span.attributes.get(SESSION_END) is not True or not root:
        return []
    last = root[-1]
    if "session_key" not in last:
        return []
    end = {
        "type": "session_end",
        "request_id": last["request_id"],
        "session_key": last["session_key"],
        "ts": last["ts"],
    }
    return [{**end, "agent_name": last["agent_name"]} if last.get("agent_name") else end]


def _steps(
    span: SpanInfo,
    role: str,
    rid: str,
    common: dict[str, Any],
    actor: str | None,
    capture_content: bool,
    notes: TraceNotes,
    is_root: bool,
) -> list[dict[str, Any]]:
    a, step = span.attributes, span.start_ns // 1000
    if role == TOOL:
        return _tool(span, rid, common, actor, capture_content, notes)
    if role == MODEL:
        return _model(span, rid, common, actor, capture_content, notes)
    if role == AGENT:
        goal = goal_of(a) if capture_content else None
        answer = final_of(a) if capture_content else None
        notes.agent_ended(span, goal, answer)
        calls = []
        if capture_content and not notes.has_tools(span.trace_id):
            calls = _calls_in_run(span, rid, common, actor)
        if is_root:
            return calls  # the run itself: its root's events say it
        name = agent_name_of_span(span) or span.name
        return [
            *calls,
            {
                **common,
                "actor": actor,
                "type": "reasoning_step",
                "event_id": f"{rid}:{span.span_id}",
                "step_index": step,
                "phase": "plan",
                "intent_summary": _clip(answer) or f"invoke_agent {name}",
                "error": _clip(span.error),
            },
        ]
    return []  # chains, graph nodes and spans that are not the agent's are not steps


def _tool(
    span: SpanInfo,
    rid: str,
    common: dict[str, Any],
    actor: str | None,
    capture_content: bool,
    notes: TraceNotes,
) -> list[dict[str, Any]]:
    a = span.attributes
    tool = str(
        first_of(a, ("gen_ai.tool.name", "tool.name"))
        or (a.get("traceloop.entity.name") if a.get("traceloop.span.kind") == "tool" else None)
        or _tool_from_name(span.name)
    )[:256]
    openinference = "openinference.span.kind" in a
    # OpenInference's own `input.value` first: with its GenAI attributes on, some of its
    # instrumentors write the tool's schema as `gen_ai.tool.call.arguments`
    arg_keys = ("input.value",) if openinference else ()
    raw_args = first_of(
        a,
        (
            *arg_keys,
            "gen_ai.tool.call.arguments",
            "tool_arguments",
            "traceloop.entity.input",
            "input.value",
        ),
    )
    raw_result = first_of(
        a,
        ("gen_ai.tool.call.result", "tool_response", "traceloop.entity.output", "output.value"),
    )
    result, says_failed = result_text(raw_result)
    if tool.lower().replace("_", "") in FINAL_ANSWER_TOOLS:
        if capture_content:
            handed = result or _answer_in(arguments_text(raw_args))
            notes.handed_over(span, handed)
        return []
    failed = span.failed or says_failed
    error = span.error
    if error is None and says_failed:  # the result is content: quoted only when it is read
        error = result if capture_content else "the tool's result says it failed"
    return [
        {
            **common,
            "actor": actor,
            "type": "tool_call",
            "event_id": f"{rid}:{span.span_id}",
            "step_index": span.start_ns // 1000,
            "tool": tool or "tool",
            "success": not failed,
            "error": _clip(error or ("error" if failed else None)),
            "latency_ms": max(0.0, (span.end_ns - span.start_ns) / 1e6),
            "args_summary": _clip(arguments_text(raw_args)) if capture_content else None,
            "result_preview": _clip(result) if capture_content else None,
        }
    ]


def _tool_from_name(name: str) -> str:
    if name.startswith("execute_tool "):
        return name[len("execute_tool ") :]
    if name.endswith(".run"):  # CrewAI's `get_order.run`
        return name[: -len(".run")]
    return name


def _answer_in(arguments: str | None) -> str | None:
    """The answer handed to a final-answer tool: its `answer` argument, else the arguments."""
    if not arguments:
        return None
    return answer_of(arguments) or task_text(arguments) or arguments


def _model(
    span: SpanInfo,
    rid: str,
    common: dict[str, Any],
    actor: str | None,
    capture_content: bool,
    notes: TraceNotes,
) -> list[dict[str, Any]]:
    a, step = span.attributes, span.start_ns // 1000
    op = span.operation if span.operation in MODEL_CALLS else "chat"
    model = first_of(a, ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name"))
    what = f"{op} {model or ''}".strip()
    events: list[dict[str, Any]] = []
    said = None
    if capture_content:
        asked_in = messages(a, output=False) or []
        answered = messages(a, output=True) or []
        said = answer_text(answered) if answered else None
        notes.model_ended(span, last_user_text(asked_in) if asked_in else None, said)
        notes.asked_for(span.trace_id, [c for m in answered for c in m.calls])
        calls = [c.name for m in answered for c in m.calls]
        if not said and calls:
            said = "asks for " + ", ".join(calls[:8])
        if asked_in and not notes.has_tools(span.trace_id):
            events = _calls_in_messages(span, rid, common, actor, asked_in, notes)
    events.append(
        {
            **common,
            "actor": actor,
            "type": "reasoning_step",
            "event_id": f"{rid}:{span.span_id}",
            "step_index": step,
            "phase": "synthesis",
            "intent_summary": _clip(said) or what,
            "error": _clip(span.error),
            "usage": _usage(span),
        }
    )
    return events


def _calls_in_messages(
    span: SpanInfo,
    rid: str,
    common: dict[str, Any],
    actor: str | None,
    asked_in: list[Message],
    notes: TraceNotes,
) -> list[dict[str, Any]]:
    """The tool calls a model call's input answers for the first time, as steps just before
    it (a hand-written loop runs them between the model calls): the answers after its last
    assistant message; where the input leaves the asking messages out (openlit), the answers
    whose ids no earlier step had, with the calls the model's outputs asked for."""
    if any(m.is_assistant and m.calls for m in asked_in):
        answered = new_tool_calls(asked_in)
    else:
        answered = notes.new_answers(span.trace_id, [m for m in asked_in if m.is_response])
    start = span.start_ns // 1000
    found = []
    for i, done in enumerate(answered):
        failed = failed_answer(done.response)
        found.append(
            {
                **common,
                "actor": actor,
                "type": "tool_call",
                # the model call that first read the answer, and its place there: unique
                # whatever ids the model gave its calls
                "event_id": f"{rid}:{span.span_id}:{i}",
                "step_index": max(0, start - len(answered) + i),
                "tool": done.call.name[:256] or "tool",
                "success": not failed,
                "error": _clip(done.response) if failed else None,
                "args_summary": _clip(arguments_text(done.call.arguments)),
                "result_preview": _clip(done.response),
            }
        )
    return found


def _calls_in_run(
    span: SpanInfo, rid: str, common: dict[str, Any], actor: str | None
) -> list[dict[str, Any]]:
    """The tool calls an agent span's output lists (client/otel_conventions.py: run_steps),
    as steps inside it, in order."""
    found = []
    start = span.start_ns // 1000
    actor = agent_name_of_span(span) or actor  # the calls the agent span itself lists
    for i, done in enumerate(run_steps(span.attributes)[:1000]):
        failure = done.failure or (done.response if failed_answer(done.response) else None)
        found.append(
            {
                **common,
                "actor": actor,
                "type": "tool_call",
                "event_id": f"{rid}:{span.span_id}:run{i}",
                "step_index": start + 1 + i,
                "tool": done.call.name or "tool",
                "success": failure is None,
                "error": _clip(failure),
                "args_summary": _clip(arguments_text(done.call.arguments)),
                "result_preview": _clip(done.response),
            }
        )
    return found


def _root(
    span: SpanInfo,
    role: str,
    common: dict[str, Any],
    capture_content: bool,
    actor: str | None,
    notes: TraceNotes,
) -> list[dict[str, Any]]:
    rid, a = common["request_id"], span.attributes
    heard = notes.heard(span.trace_id)
    outer = heard.agent  # the outermost agent span below the root
    # a name an attribute gives first; then the root's own name when it reads like an agent's
    # (a team's span around its run, a named graph), before a name read from a framework's
    # span name below it (LangGraph's node called "agent")
    agent = (
        own_agent_name(a)
        or (outer.named if outer else None)
        or (agent_name_of_span(span) if role == AGENT else None)
        or (root_name_as_agent(span.name) if role not in (TOOL, MODEL) else None)
        or (outer.called if outer else None)
        or heard.named
        or service_name(span.resource)
        or span.name[:256]
    )
    goal = answer = None
    if capture_content:
        goal = (
            goal_of(a)
            or (outer.goal if outer else None)
            or (heard.asked.text if heard.asked else None)
            or raw_input(a)
        )
        answer = (
            final_of(a)
            or (heard.handed.text if heard.handed else None)
            or (outer.answer if outer else None)
            or (heard.said.text if heard.said and role != MODEL else None)
        )
        if answer is None and role == MODEL:  # a model call alone: what it asked for
            calls = [c.name for m in messages(a, output=True) or [] for c in m.calls]
            answer = "asks for " + ", ".join(calls[:8]) if calls else None
    goal = goal or str(a.get("gen_ai.agent.description") or f"run of {agent}")
    error = span.error
    content = heard.content or has_content(a)
    if error is not None:
        output = answer or f"{agent} failed: {error}"
    elif answer:
        output = answer
    elif not capture_content and content:
        output = (
            f"{agent} finished its run (answer not read: the trace carries message content, "
            "and TRACEJUDGE_OTEL_CAPTURE_CONTENT is off)"
        )
    elif not content:
        output = (
            f"{agent} finished its run (no answer in the trace: the instrumentation did not "
            "capture message content; turn its content capture on, docs/instrumentations.md)"
        )
    else:
        # worded so that no rule reads it as the agent admitting a failure
        output = (
            f"{agent} finished its run (its answer is in none of the attributes read from "
            f"root span {span.name!r} of {span.scope or 'an unnamed instrumentation'})"
        )
    notes.forget(span.trace_id)
    common = {**common, "agent_name": agent[:256]}
    final: dict[str, Any] = {
        **common,
        "actor": actor,
        "type": "final_response",
        "event_id": f"{rid}:final",
        "step_index": span.end_ns // 1000,
        "output": clip(output, LONG_TEXT_LIMIT),
    }
    if error is not None:
        final["error"] = _clip(error)
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
        final,
    ]


def _usage(span: SpanInfo) -> dict[str, Any] | None:
    """A model call's usage from the GenAI attributes (OpenInference's and OpenLLMetry's
    older names too)."""
    a = span.attributes
    tokens_in = first_of(
        a, ("gen_ai.usage.input_tokens", "llm.token_count.prompt", "gen_ai.usage.prompt_tokens")
    )
    tokens_out = first_of(
        a,
        (
            "gen_ai.usage.output_tokens",
            "llm.token_count.completion",
            "gen_ai.usage.completion_tokens",
        ),
    )
    model = first_of(a, ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name"))
    usage = {
        "model": str(model)[:256] if model else None,
        "input_tokens": tokens_in if isinstance(tokens_in, int) and tokens_in >= 0 else None,
        "output_tokens": tokens_out if isinstance(tokens_out, int) and tokens_out >= 0 else None,
        "latency_ms": max(0.0, (span.end_ns - span.start_ns) / 1e6),
    }
    return {k: v for k, v in usage.items() if v is not None}


def _clip(text: str | None) -> str | None:
    return None if text is None else clip(text, SUMMARY_LIMIT)
