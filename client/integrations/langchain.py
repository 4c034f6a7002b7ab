"""A LangChain callback handler: every top-level run of a chain, agent or LangGraph graph is one
request to judge.

    from tracejudge.client import Tracer
    from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler

    handler = TracejudgeCallbackHandler(Tracer("kafka:9092"), agent_name="support-bot")
    graph.invoke({"messages": [("user", "Refund order 7")]}, config={"callbacks": [handler]})

The run's input is the goal; each model call is a reasoning step with its token usage and
model; each tool run is a tool call (failed when the tool raised); the top-level run's end is
the final response (its last message), or its error. In a LangGraph graph each step's `actor`
is the node that took it (`langgraph_node` in the callback's metadata: a model's node, the
`ToolNode` for a tool), and the final response's is the last step's; plain LangChain has no
node and sends none. Callbacks hand events to the tracer's buffer and return.

Stopping: when the worker tells a run to stop (a budget crossed, a loop found), the
handler raises `InterventionStop` from the run's next model or tool callback, before that
model or tool is called: the callback manager lets a handler's exception through only when its
`raise_error` is True, so it is True here and every other callback catches whatever goes wrong
in it and logs it (nothing but `InterventionStop` ever reaches the agent). LangGraph re-raises
a node's exception unchanged, so `graph.invoke`/`ainvoke` (and any chain) raise
`InterventionStop` itself; a `ToolNode(handle_tool_errors=True)` turns the one raised before a
tool into an error message for the model, and the model's call, next, raises it out of the
graph. The run's final response is then "stopped: <message>" with `stopped_by` its
intervention_id. `stop_on_intervention=False`: nothing raises, the run goes on. LangChain's
callback manager logs every exception a handler raises as "Error in <handler>.<callback>" before
letting it through; a filter on its logger drops that record for an `InterventionStop` alone
(a stop is no error: the handler logs it at INFO on `tracejudge.client`), and every other passes.

    try:
        graph.invoke(inputs, config={"callbacks": [handler]})
    except InterventionStop as stop:
        print("stopped:", stop.intervention.crossed, stop.intervention.message)

Steering: an intervention whose action is "steer" does not stop the run; its words are for the
model's next call. A callback cannot give them to it: the `messages` that `on_chat_model_start`
receives are a copy made for tracing (`_format_for_tracing` builds a new list), and changing the
messages in it in place would change the graph's state behind its back. So the handler gives the
graph what to add, through LangGraph's own hook before every model call:

    graph = create_react_agent(model, tools, pre_model_hook=handler.pre_model_hook)

The hook adds each steer that arrived since the last model call to the state's `messages`, once
(a user message by default, `steer_role="system"` for a system one; text from `steer_text`,
client/interventions.py; id `tracejudge-steer-<intervention_id>`): the model reads it in its
next call, after the step that crossed the line, and in every later call as part of the
conversation, and the graph's result and checkpoints keep it. A graph of your own, or a plain
chain, takes the same messages where it builds the model's input: `handler.steer_messages(config)`
with the `config` LangChain passes to the node or function (it names the run), e.g. a node
returning `{"messages": handler.steer_messages(config)}` before the model's node, or a hook of
your own (trimming, summaries) adding them. Once a run was told to stop there are none: its
next model call raises.

LangChain can also emit OpenTelemetry (through OpenInference's instrumentation, read by
`tracejudge otel` and by `integrations.otel`); this handler needs no instrumentation package
and sees the tools' errors and the models' usage as LangChain reports them.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from tracejudge.client.events import Recorder, model_usage
from tracejudge.client.interventions import InterventionStop, steer_text

if TYPE_CHECKING:
    from langchain_core.outputs import LLMResult
    from langchain_core.runnables import RunnableConfig

    from tracejudge.client.tracer import AsyncTracer, Tracer

log = logging.getLogger("tracejudge.client")
# where langchain_core logs "Error in <handler>.<callback> callback: <repr of the exception>"
CALLBACK_MANAGER_LOGGER = "langchain_core.callbacks.manager"

_Callback = TypeVar("_Callback", bound=Callable[..., None])


def _quiet(callback: _Callback) -> _Callback:
    """A callback that never raises into the agent: the handler's `raise_error` is True for
    `InterventionStop` alone, so whatever else goes wrong here is logged instead."""

    @functools.wraps(callback)
    def guarded(*args: Any, **kwargs: Any) -> None:
        try:
            callback(*args, **kwargs)
        except Exception:
            log.exception("tracejudge: %s failed; the agent goes on", callback.__name__)

    return cast(_Callback, guarded)


class _StopsAreNotErrors(logging.Filter):
    """Drops the callback manager's record of an `InterventionStop` a handler raised: the
    manager logs whatever a handler raises as an error, a deliberate stop included, and has no
    other way to let a handler stop a run. Matched by the exception's repr among the record's
    arguments; every other record passes."""

    PREFIX = f"{InterventionStop.__name__}("

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(a, str) and a.startswith(self.PREFIX) for a in args)


_STOPS_ARE_NOT_ERRORS = _StopsAreNotErrors()


@dataclass
class _Run:
    recorder: Recorder
    # name, input, start, actor
    tools: dict[UUID, tuple[str, str, float, str | None]] = field(default_factory=dict)
    models: dict[UUID, tuple[float, str | None]] = field(default_factory=dict)  # start, actor
    stopped: InterventionStop | None = None  # raised into the run by this handler
    last_actor: str | None = None  # the node of the last step: the final response's


class TracejudgeCallbackHandler(BaseCallbackHandler):
    # LangChain's callback manager swallows a handler's exception unless this is True; only
    # InterventionStop is ever raised (every other callback is `_quiet`)
    raise_error = True

    def __init__(
        self,
        tracer: Tracer | AsyncTracer | None,
        *,
        agent_name: str | None = None,
        agent_version: str | None = None,
        planned_steps: Sequence[str] | None = None,
        into: Recorder | None = None,
        stop_on_intervention: bool = True,
        steer_role: Literal["user", "system"] = "user",
    ) -> None:
        """`planned_steps`: the steps every run declares (a run's own, given in its config's
        metadata as `tracejudge_planned_steps`, win), so a step it skips leaves it incomplete.
        `into`: record the graph's calls into this request, begun elsewhere (a reflection's
        follow-up, client/reflections.py), instead of starting one per top-level run; its
        owner ends it (the handler sends no final response into it); `tracer` may then be
        None. `stop_on_intervention`: raise `InterventionStop` into a run told to stop, before
        its next model or tool call (False: record only; nothing ever raises). `steer_role`:
        the role of the messages that carry steers (`pre_model_hook`, `steer_messages`); a
        user message is taken by every provider in the middle of a conversation, a system
        one is not (langchain-anthropic raises on one that is not at the start)."""
        if tracer is None and into is None:
            raise ValueError("a tracer, or a request to record `into`")
        self.stop_on_intervention = stop_on_intervention
        self.steer_role = steer_role
        self.raise_error = stop_on_intervention
        if stop_on_intervention:  # once per logger: addFilter keeps one of each
            logging.getLogger(CALLBACK_MANAGER_LOGGER).addFilter(_STOPS_ARE_NOT_ERRORS)
        self.tracer = tracer
        self.agent_name = agent_name
        self.agent_version = agent_version
        self.planned_steps = list(planned_steps or [])
        self.into = into
        self.last_request_id: str | None = None
        self.last_recorder: Recorder | None = None  # the last top-level run's request
        self._runs: dict[UUID, _Run] = {}  # top-level run id -> its request
        self._root_of: dict[UUID, UUID] = {}  # any run id -> its top-level run id
        self._lock = threading.Lock()  # tools may run on a thread pool

    # -- runs ----------------------------------------------------------------------------

    @_quiet
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is not None:
            self._child(run_id, parent_run_id)
            return
        name = kwargs.get("name") or (serialized or {}).get("name")
        metadata = kwargs.get("metadata") or {}
        planned = metadata.get("tracejudge_planned_steps", self.planned_steps)
        if self.into is not None:
            recorder = self.into
        else:
            assert self.tracer is not None  # checked when made
            recorder = self.tracer.request(
                _text(inputs) or f"run of {name or 'a chain'}",
                request_id=f"lc-{run_id}",
                agent_name=self.agent_name or (str(name) if name else None),
                agent_version=self.agent_version,
                planned_steps=[str(step) for step in planned or []],
                session_key=_session_of(metadata),
            )
        with self._lock:
            self._runs[run_id] = _Run(recorder)
            self._root_of[run_id] = run_id
        self.last_request_id = recorder.request_id
        self.last_recorder = recorder

    @_quiet
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._end(run_id)
        if run is not None and self.into is None:
            # a stop raised before a tool that a ToolNode handled, and the run then ended
            stopped = None if run.stopped is None else run.stopped.intervention.intervention_id
            run.recorder.final(
                _text(outputs, last=True) or "(no answer)",
                stopped_by=stopped,
                actor=run.last_actor,
            )

    @_quiet
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._end(run_id)
        if run is None or self.into is not None:
            return
        stop = _stop_in(error) or run.stopped
        if stop is not None:
            told = stop.intervention
            run.recorder.final(f"stopped: {told.message}", stopped_by=told.intervention_id)
        else:
            said = f"{type(error).__name__}: {error}"
            run.recorder.final(f"failed: {said}", error=said)

    # -- model calls -----------------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: Any,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_started(run_id, parent_run_id, kwargs.get("metadata"))
        self._stop_if_told(run_id)

    def on_llm_start(
        self,
        serialized: Any,
        prompts: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_started(run_id, parent_run_id, kwargs.get("metadata"))
        self._stop_if_told(run_id)

    @_quiet
    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._run_of(run_id)
        if run is None:
            return
        started, actor = run.models.pop(run_id, (None, None))
        latency = None if started is None else (time.monotonic() - started) * 1000
        text, calls, usage, model = _generation(response)
        summary = text or (f"decided to call {', '.join(calls)}" if calls else "model call")
        run.last_actor = actor
        run.recorder.reasoning(
            summary,
            phase="plan" if calls else "synthesis",
            usage=model_usage(
                model, usage.get("input_tokens"), usage.get("output_tokens"), None, latency
            ),
            actor=actor,
        )

    @_quiet
    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._run_of(run_id)
        if run is not None:
            _, actor = run.models.pop(run_id, (None, None))
            run.recorder.reasoning(
                "model call failed", error=f"{type(error).__name__}: {error}", actor=actor
            )

    # -- tools -------------------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is None:
            return  # a tool called on its own, outside any run we judge
        self._tool_started(
            serialized, input_str, run_id, parent_run_id, kwargs.get("name"), kwargs.get("metadata")
        )
        self._stop_if_told(run_id)

    @_quiet
    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._tool_done(run_id, success=True, result=_text(output))

    @_quiet
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._tool_done(run_id, success=False, error=f"{type(error).__name__}: {error}")

    # -- steers ---------------------------------------------------------------------------

    def pre_model_hook(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """LangGraph's `create_react_agent(..., pre_model_hook=handler.pre_model_hook)`: a node
        before every model call that adds the run's new steers to the state's `messages`
        (module docstring); an empty update when there are none."""
        found = self.steer_messages(config)
        return {"messages": found} if found else {}

    def steer_messages(self, config: RunnableConfig | None = None) -> list[BaseMessage]:
        """The steers the run was told and not yet given, as messages for its next model call,
        each steer once; [] when none, or once the run was told to stop. `config`: the one
        LangChain passed to the node or function asking, which names the run; without it (or
        when it names none of this handler's runs), the only run open here. Never raises."""
        try:
            recorder = self._recorder_of(config)
            if recorder is None or recorder.should_stop():
                return []
            found = recorder.pending_steers()
            for steer in found:
                log.info(
                    "tracejudge: steering %s as told (%s): %s",
                    recorder.request_id,
                    steer.intervention_id,
                    steer.message,
                )
            kind = HumanMessage if self.steer_role == "user" else SystemMessage
            return [
                kind(content=steer_text(s), id=f"tracejudge-steer-{s.intervention_id}")
                for s in found
            ]
        except Exception:  # the agent goes on, unsteered
            log.exception("tracejudge: steer_messages failed; the agent goes on")
            return []

    def _recorder_of(self, config: RunnableConfig | None) -> Recorder | None:
        """The request of the run a node's or function's `config` belongs to: its callbacks'
        parent run is the node's (or function's) own run."""
        parent = getattr((config or {}).get("callbacks"), "parent_run_id", None)
        run = self._run_of(parent) if isinstance(parent, UUID) else None
        if run is None:
            with self._lock:
                open_runs = list(self._runs.values())
            run = open_runs[0] if len(open_runs) == 1 else None
        return None if run is None else run.recorder

    # -- bookkeeping -------------------------------------------------------------------------

    def _child(self, run_id: UUID, parent_run_id: UUID) -> None:
        with self._lock:
            root = self._root_of.get(parent_run_id)
            if root is not None:
                self._root_of[run_id] = root

    def _run_of(self, run_id: UUID) -> _Run | None:
        with self._lock:
            root = self._root_of.get(run_id)
            return None if root is None else self._runs.get(root)

    def _end(self, run_id: UUID) -> _Run | None:
        """The request of a top-level run that ended (None for any other run)."""
        with self._lock:
            run = self._runs.pop(run_id, None)
            if run is not None:
                gone = [r for r, root in self._root_of.items() if root == run_id]
                for r in gone:
                    del self._root_of[r]
            return run

    @_quiet
    def _model_started(
        self, run_id: UUID, parent_run_id: UUID | None, metadata: Mapping[str, Any] | None
    ) -> None:
        if parent_run_id is not None:
            self._child(run_id, parent_run_id)
        run = self._run_of(run_id)
        if run is not None:
            run.models[run_id] = (time.monotonic(), _node(metadata))

    @_quiet
    def _tool_started(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        run_id: UUID,
        parent_run_id: UUID,
        name: Any,
        metadata: Mapping[str, Any] | None,
    ) -> None:
        self._child(run_id, parent_run_id)
        run = self._run_of(run_id)
        if run is not None:
            name = name or (serialized or {}).get("name") or "tool"
            run.tools[run_id] = (str(name), input_str, time.monotonic(), _node(metadata))

    def _stop_if_told(self, run_id: UUID) -> None:
        """Raise InterventionStop into the run before its next model or tool call, once the
        worker told its request to stop (a read of what the tracer's reader kept)."""
        if not self.stop_on_intervention:
            return
        run = self._run_of(run_id)
        told = None if run is None else run.recorder.stop_reason
        if run is None or told is None:
            return
        with self._lock:
            run.models.pop(run_id, None)  # not called: nothing to time
            run.tools.pop(run_id, None)
        if run.stopped is None:
            run.stopped = InterventionStop(told)
            log.info(
                "tracejudge: stopping %s as told (%s): %s",
                run.recorder.request_id,
                told.intervention_id,
                told.message,
            )
        raise InterventionStop(told)

    def _tool_done(
        self, run_id: UUID, *, success: bool, result: str | None = None, error: str | None = None
    ) -> None:
        run = self._run_of(run_id)
        if run is None:
            return
        name, given, started, actor = run.tools.pop(run_id, ("tool", "", time.monotonic(), None))
        run.last_actor = actor
        run.recorder.tool_call(
            name,
            success=success,
            args=given or None,
            result=result,
            error=error,
            latency_ms=(time.monotonic() - started) * 1000,
            actor=actor,
        )


def _node(metadata: Mapping[str, Any] | None) -> str | None:
    """The LangGraph node a callback's run belongs to (None outside a graph)."""
    node = (metadata or {}).get("langgraph_node")
    return str(node) if node else None


def _stop_in(error: BaseException) -> InterventionStop | None:
    """The InterventionStop that ended a run, if any: the error itself, or what it wraps (a
    framework that re-raises as its own type keeps ours as the cause)."""
    seen: BaseException | None = error
    for _ in range(8):  # causes chain; a cycle or a long chain ends the search
        if seen is None:
            return None
        if isinstance(seen, InterventionStop):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _generation(response: LLMResult) -> tuple[str, list[str], dict[str, int], str | None]:
    """Text, tool calls asked for, token usage and model of a model call's result."""
    text, model = "", None
    calls: list[str] = []
    usage: dict[str, int] = {}
    for generations in response.generations:
        for generation in generations:
            text = text or str(getattr(generation, "text", "") or "")
            message = getattr(generation, "message", None)
            if message is None:
                continue
            calls += [str(c.get("name")) for c in getattr(message, "tool_calls", None) or []]
            meta = getattr(message, "usage_metadata", None) or {}
            for key in ("input_tokens", "output_tokens"):
                if isinstance(meta.get(key), int):
                    usage[key] = usage.get(key, 0) + meta[key]
            model = model or (getattr(message, "response_metadata", None) or {}).get("model_name")
    output = response.llm_output or {}
    if not usage and isinstance(output.get("token_usage"), Mapping):
        given = output["token_usage"]
        for key, theirs in (
            ("input_tokens", "prompt_tokens"),
            ("output_tokens", "completion_tokens"),
        ):
            if isinstance(given.get(theirs), int):
                usage[key] = given[theirs]
    return text, calls, usage, model or output.get("model_name")


# where a run's conversation is named: ours, LangGraph's checkpointer thread (its configurable
# keys reach the callbacks' metadata), and the names LangSmith groups threads by
SESSION_KEYS = ("tracejudge_session_key", "thread_id", "session_id", "conversation_id")


def _session_of(metadata: Any) -> str | None:
    """The run's session (conversation) key from its metadata, if it names one."""
    for name in SESSION_KEYS:
        value = metadata.get(name) if isinstance(metadata, dict) else None
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)[:256]
    return None


def _text(value: Any, last: bool = False) -> str:
    """The words of a run's input or output: a message's content, the last message of a
    `messages` list (`last`) or the first otherwise, a string field, or the value as text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    content = getattr(value, "content", None)
    if content is not None:
        return content if isinstance(content, str) else _text(content)
    if isinstance(value, Mapping):
        for key in ("messages", "input", "question", "query", "output", "answer", "result"):
            if key in value:
                return _text(value[key], last)
        return ""
    if isinstance(value, Sequence) and value:
        if all(isinstance(v, Mapping) and "text" in v for v in value):  # content blocks
            return " ".join(str(v["text"]) for v in value)
        pick = value[-1] if last else _first_user(value)
        if isinstance(pick, tuple) and len(pick) == 2:  # ("user", "text")
            return str(pick[1])
        return _text(pick)
    return str(value)


def _first_user(messages: Sequence[Any]) -> Any:
    for message in messages:
        role = getattr(message, "type", None) or (
            message[0] if isinstance(message, tuple) else None
        )
        if role in ("human", "user"):
            return message
    return messages[0]
