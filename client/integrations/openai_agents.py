"""An OpenAI Agents SDK tracing processor: every trace of the SDK (one `Runner.run`) is one
request to judge.

    from agents import add_trace_processor
    from tracejudge.client import Tracer
    from tracejudge.client.integrations.openai_agents import TracejudgeProcessor

    add_trace_processor(TracejudgeProcessor(Tracer("kafka:9092")))

The SDK has tracing of its own (not OpenTelemetry), so this processor is the route for it:
model calls (generation and response spans) are reasoning steps with their usage and model,
function spans are tool calls (failed when the span has an error), handoffs are reasoning
steps, and the trace's end is the final response (the last model output). The goal is the
user's first message, read from the first model call's input: the SDK leaves inputs out of its
spans when `trace_include_sensitive_data` is off, and the goal is then the trace's name when
the caller chose it (empty for the SDK's default).
The agent's name is the outermost agent span's (the agent `Runner.run` was given), or the
trace's workflow name when the caller set one; never the SDK's default "Agent workflow", which
every run without a `RunConfig(workflow_name=...)` has. Each step's `actor` is the agent whose
span it belongs to (the nearest agent span above it: after a handoff, the agent handed to; the
handoff itself, the agent handing off), and the final response's is the agent that said it.
Callbacks hand events to the tracer's buffer and return; nothing here raises into the agent.

Stopping: a tracing processor only watches, it cannot end a run. The SDK's own way
is run hooks: `Runner.run(..., hooks=processor.hooks())` raises `AgentsInterventionStop` from
the run's next `on_llm_start` or `on_tool_start` once the worker told its request to stop (a
budget crossed, a loop found), before that model or tool is called. It is an `InterventionStop`
and an `AgentsException` both: the Runner hands an exception of its own family to the caller
unchanged, with its `run_data` (the items so far) filled in, where one of another family raised
before a tool would come out wrapped in a `UserError`. (A tool input guardrail's tripwire also
surfaces, but has to be set on every tool and does not cover model calls; an agent's input
guardrail runs before the first turn only.) The trace's final response is then
"stopped: <message>" with `stopped_by` its intervention_id.

    processor = TracejudgeProcessor(Tracer("kafka:9092"))
    add_trace_processor(processor)
    try:
        result = await Runner.run(agent, "Fix the build", hooks=processor.hooks())
    except InterventionStop as stop:  # AgentsInterventionStop; `stop.run_data`: items so far
        print("stopped:", stop.intervention.crossed, stop.intervention.message)

Your own hooks: subclass `TracejudgeRunHooks` and call `super()` in `on_llm_start` and
`on_tool_start`. The run must be traced (no `tracing_disabled`): the hooks find the run's
request by the SDK's current trace.

Steering: an intervention whose action is "steer" does not stop the run; its words are for the
model's next call. The SDK's way to change a model call's input is the run's
`call_model_input_filter`, called just before each model call with the input the model is to
get (a copy: what the filter returns is what is sent):

    result = await Runner.run(
        agent, "Fix the build", hooks=processor.hooks(),
        run_config=RunConfig(call_model_input_filter=processor.call_model_input_filter),
    )

It appends each steer that arrived since the last model call to that call's input, once, as a
user message (`TracejudgeProcessor(..., steer_role="system")`: a system one; text from
`steer_text`, client/interventions.py). The SDK keeps nothing a filter adds in the run's items:
the model reads the steer in that call, and its answer to it stays in the conversation. A
filter of your own calls `processor.with_steers(data.model_data)` on what it returns. (The hooks'
`on_llm_start` also gets the list sent, but only to look at; dynamic instructions,
`Agent(instructions=fn)`, would mix the steer into the agent's own prompt.) Once a run was told
to stop there are none: the hooks raise before that call.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agents import (
    Agent,
    AgentsException,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Tool,
    TResponseInputItem,
)
from agents.run_config import CallModelData, ModelInputData
from agents.tracing import (
    AgentSpanData,
    FunctionSpanData,
    GenerationSpanData,
    HandoffSpanData,
    ResponseSpanData,
    Span,
    Trace,
    get_current_trace,
)
from agents.tracing.processor_interface import TracingProcessor

from tracejudge.client.events import Recorder, model_usage
from tracejudge.client.interventions import InterventionStop, steer_text
from tracejudge.models.outputs import Intervention

if TYPE_CHECKING:
    from tracejudge.client.tracer import AsyncTracer, Tracer

log = logging.getLogger("tracejudge.client")

# the trace name of every run whose caller named no workflow: it names no agent
DEFAULT_WORKFLOW_NAME: str = RunConfig().workflow_name


# the trace metadata key naming a request begun elsewhere that a run records into
INTO_KEY = "tracejudge_into"


@dataclass
class _Request:
    name: str
    agent: str | None = None  # the outermost agent span's name
    recorder: Recorder | None = None
    into: bool = False  # recording into a request begun elsewhere: its owner ends it
    # the SDK's `group_id` ("links multiple traces from the same conversation"): its session
    session: str | None = None
    last_output: str = ""
    last_actor: str | None = None  # the agent that said `last_output`
    errors: list[str] = field(default_factory=list)
    stopped: Intervention | None = None  # raised into the run by the hooks
    # every span started in the trace: its parent, and its name if an agent span
    spans: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)

    def actor_of(self, span: Span[Any]) -> str | None:
        """The agent a span belongs to: its nearest agent span above it."""
        above = span.parent_id
        for _ in range(64):  # a cycle or a deep chain ends the search
            if above is None:
                return None
            above, agent = self.spans.get(above, (None, None))
            if agent:
                return agent
        return None


class AgentsInterventionStop(InterventionStop, AgentsException):
    """The run was told to stop: an `InterventionStop` that the SDK's Runner treats as its own
    (re-raised unchanged, with `run_data` filled in)."""


class TracejudgeRunHooks(RunHooks[Any]):
    """Run hooks that end a run told to stop, before its next model or tool call (module
    docstring). Made by `TracejudgeProcessor.hooks()`; subclasses call `super()`."""

    def __init__(self, processor: TracejudgeProcessor) -> None:
        self.processor = processor

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[Any],
    ) -> None:
        self.processor.stop_if_told()

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        self.processor.stop_if_told()


class TracejudgeProcessor(TracingProcessor):
    def __init__(
        self,
        tracer: Tracer | AsyncTracer,
        *,
        agent_name: str | None = None,
        agent_version: str | None = None,
        steer_role: Literal["user", "system"] = "user",
    ) -> None:
        """`steer_role`: the role of the message that carries a steer into a model call's
        input (`call_model_input_filter`)."""
        self.tracer = tracer
        self.agent_name = agent_name
        self.agent_version = agent_version
        self.steer_role = steer_role
        self.last_request_id: str | None = None
        self._requests: dict[str, _Request] = {}
        self._into: dict[str, Recorder] = {}  # request id -> a request begun elsewhere
        self._lock = threading.Lock()

    def hooks(self) -> TracejudgeRunHooks:
        """Run hooks for `Runner.run(..., hooks=...)` that stop a run told to stop."""
        return TracejudgeRunHooks(self)

    def current_request(self) -> Recorder | None:
        """The request of the run in progress here (the SDK's current trace), from its first
        model call on; None outside a traced run. Its `interventions` hold what the worker
        told it, steers included."""
        request = self._current()
        return None if request is None else request.recorder

    def stop_if_told(self) -> None:
        """Raise `AgentsInterventionStop` when the run in progress here was told to stop; a
        read of what the tracer's reader kept, never a wait."""
        request = self._current()
        recorder = None if request is None else request.recorder
        told = None if recorder is None else recorder.stop_reason
        if request is None or told is None:
            return
        request.stopped = request.stopped or told
        raise AgentsInterventionStop(told)

    def call_model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """For `RunConfig(call_model_input_filter=...)`: the model call's input with the run's
        new steers added (module docstring)."""
        return self.with_steers(data.model_data)

    def with_steers(self, model_data: ModelInputData) -> ModelInputData:
        """`model_data` with the steers the run in progress here was told and not yet given
        appended to its input, each steer once, as one message each; unchanged when there are
        none or the run was told to stop. Never raises."""
        try:
            request = self._current()
            recorder = None if request is None else request.recorder
            if recorder is None or recorder.should_stop():
                return model_data
            found = recorder.pending_steers()
            if not found:
                return model_data
            for steer in found:
                log.info(
                    "tracejudge: steering %s as told (%s): %s",
                    recorder.request_id,
                    steer.intervention_id,
                    steer.message,
                )
            said: list[TResponseInputItem] = [
                {"role": self.steer_role, "content": steer_text(s)} for s in found
            ]
            return ModelInputData(
                input=[*model_data.input, *said], instructions=model_data.instructions
            )
        except Exception:  # the agent goes on, unsteered
            log.exception("tracejudge: could not add a steer to the model's input")
            return model_data

    def _current(self) -> _Request | None:
        trace = get_current_trace()
        if trace is None:
            return None
        with self._lock:
            return self._requests.get(trace.trace_id)

    @contextlib.contextmanager
    def recording_into(self, run: Recorder) -> Iterator[dict[str, str]]:
        """Record the runs made inside into `run`, a request begun elsewhere (a reflection's
        follow-up, client/reflections.py), instead of one request per trace; `run`'s owner
        ends it. Yields the trace metadata to give the run, which is how the processor (one
        for the whole process) tells this run's trace from others running at the same time:

            with processor.recording_into(run) as metadata:
                Runner.run_sync(agent, prompt, run_config=RunConfig(trace_metadata=metadata))
        """
        with self._lock:
            self._into[run.request_id] = run
        try:
            yield {INTO_KEY: run.request_id}
        finally:
            with self._lock:
                self._into.pop(run.request_id, None)

    def on_trace_start(self, trace: Trace) -> None:
        metadata = getattr(trace, "metadata", None) or {}
        with self._lock:
            into = self._into.get(str(metadata.get(INTO_KEY, "")))
            request = _Request(trace.name, recorder=into, into=into is not None)
            group = getattr(trace, "group_id", None)
            request.session = group[:256] if isinstance(group, str) and group else None
            self._requests[trace.trace_id] = request

    def on_trace_end(self, trace: Trace) -> None:
        with self._lock:
            request = self._requests.pop(trace.trace_id, None)
        if request is None or request.into:
            return
        try:
            recorder = self._recorder(trace.trace_id, request, None)
            if request.stopped is not None:
                told = request.stopped
                recorder.final(f"stopped: {told.message}", stopped_by=told.intervention_id)
            elif request.errors and not request.last_output:
                recorder.final(f"failed: {request.errors[-1]}", error=request.errors[-1])
            else:
                recorder.final(request.last_output or "(no answer)", actor=request.last_actor)
        except Exception:
            log.exception("tracejudge: could not record the end of trace %s", trace.trace_id)

    def on_span_start(self, span: Span[Any]) -> None:
        # the agent span starts before its model calls, where the recorder is made; the first
        # to start is the outermost (a handoff's agent span comes later and keeps the name).
        # Every span is noted with its parent: a step's actor is its nearest agent span's name
        data = span.span_data
        agent = data.name if isinstance(data, AgentSpanData) and data.name else None
        with self._lock:
            request = self._requests.get(span.trace_id)
            if request is None:
                return
            request.spans[span.span_id] = (span.parent_id, agent)
            if agent is not None and request.agent is None:
                request.agent = agent

    def on_span_end(self, span: Span[Any]) -> None:
        try:
            self._span(span)
        except Exception:  # a span we cannot read: the agent goes on
            log.exception("tracejudge: could not read a span of trace %s", span.trace_id)

    def shutdown(self) -> None:
        return None

    def force_flush(self) -> None:
        self.tracer._sender.flush(30.0)

    def _span(self, span: Span[Any]) -> None:
        with self._lock:
            request = self._requests.get(span.trace_id)
            actor = None if request is None else request.actor_of(span)
        if request is None:
            return
        data = span.span_data
        error = _error(span)
        if error:
            request.errors.append(error)
        if isinstance(data, GenerationSpanData | ResponseSpanData):
            goal, text, calls, usage, model = _model_call(data)
            recorder = self._recorder(span.trace_id, request, goal)
            if text:
                request.last_output, request.last_actor = text, actor
            summary = text or (f"decided to call {', '.join(calls)}" if calls else "model call")
            recorder.reasoning(
                summary,
                phase="plan" if calls else "synthesis",
                error=error,
                usage=model_usage(model, usage.get("input_tokens"), usage.get("output_tokens")),
                actor=actor,
            )
        elif isinstance(data, FunctionSpanData):
            self._recorder(span.trace_id, request, None).tool_call(
                data.name,
                success=error is None,
                args=data.input,
                result=None if data.output is None else str(data.output),
                error=error,
                actor=actor,
            )
        elif isinstance(data, HandoffSpanData):
            self._recorder(span.trace_id, request, None).reasoning(
                f"handed off from {data.from_agent} to {data.to_agent}",
                error=error,
                actor=actor or data.from_agent,
            )

    def _recorder(self, trace_id: str, request: _Request, goal: str | None) -> Recorder:
        """The request's recorder, made at its first step: the goal comes with the first model
        call's input."""
        if request.recorder is None:
            request.recorder = self.tracer.request(
                # the SDK's default trace name says nothing of the goal: none is better
                goal or _workflow(request.name) or "",
                request_id=f"oai-{trace_id}",
                agent_name=self.agent_name or request.agent or _workflow(request.name),
                agent_version=self.agent_version,
                session_key=request.session,
            )
            self.last_request_id = request.recorder.request_id
        return request.recorder


def _workflow(name: str) -> str | None:
    """The trace's name when the caller chose it."""
    return None if not name or name == DEFAULT_WORKFLOW_NAME else name


def _error(span: Span[Any]) -> str | None:
    error = span.error
    if not error:
        return None
    message = error.get("message") if isinstance(error, Mapping) else str(error)
    return str(message or "error")


def _model_call(
    data: GenerationSpanData | ResponseSpanData,
) -> tuple[str | None, str, list[str], dict[str, int], str | None]:
    """Goal (the first user message of its input), text, tool calls, usage, model."""
    usage: dict[str, int] = {}
    if isinstance(data, GenerationSpanData):
        inputs: Any = data.input
        items: Any = data.output or []
        model = data.model
        given: Any = data.usage or {}
    else:
        inputs = data.input
        response = data.response
        items = [] if response is None else [i.model_dump() for i in response.output]
        model = None if response is None else str(response.model)
        given = data.usage or (
            {} if response is None or response.usage is None else response.usage.model_dump()
        )
    for key in ("input_tokens", "output_tokens"):
        if isinstance(given.get(key), int):
            usage[key] = given[key]
    texts, calls = [], []
    for item in items if isinstance(items, Sequence) else []:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "function_call" or (item.get("name") and "arguments" in item):
            calls.append(str(item.get("name")))
        for call in item.get("tool_calls") or []:
            calls.append(str((call.get("function") or {}).get("name") or call.get("name")))
        texts.append(_content(item.get("content")))
    return _first_user(inputs), " ".join(t for t in texts if t), calls, usage, model


def _first_user(inputs: Any) -> str | None:
    if isinstance(inputs, str):
        return inputs
    for item in inputs if isinstance(inputs, Sequence) else []:
        if isinstance(item, Mapping) and item.get("role") == "user":
            return _content(item.get("content")) or None
    return None


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return " ".join(
            str(part.get("text"))
            for part in content
            if isinstance(part, Mapping) and part.get("text")
        )
    return ""
