"""The run a check reads: a read-only view of a window, texts clipped and masked like every
output, so a check sees what the worker holds and nothing a log line could not show."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from tracejudge.judges.masking.clipping import clip_whole
from tracejudge.judges.masking.redact import mask
from tracejudge.models.agents import RunAgent
from tracejudge.models.events import (
    Event,
    FinalResponse,
    Iteration,
    ReasoningStep,
    TaskStarted,
    ToolCall,
    UserMessage,
)
from tracejudge.models.window import Window

TEXT_LIMIT = 2_000  # per text of a step, as the contract's summaries

StepType = Literal["tool_call", "reasoning_step", "user_message", "iteration"]


def _text(value: object) -> str | None:
    if value is None or value == "":
        return None
    return mask(clip_whole(str(value), TEXT_LIMIT))


def _clipped(value: object) -> str | None:
    if value is None or value == "":
        return None
    return clip_whole(str(value), TEXT_LIMIT)


class StepView:
    """One step: `index` (its step_index), `type`, `tool` (tool calls), `args` and `result`
    (text), `ok` (True/False for a tool call or an iteration, else None), `text` (what a
    reasoning step or a user message says), `actor` (who took it, in a multi-agent run).

    Read-only. Its texts are clipped and masked when first read: a check that reads only tools
    and outcomes (most checks that run on every step) costs no masking."""

    __slots__ = ("_masked", "_raw", "actor", "index", "ok", "tool", "type")
    index: int
    type: StepType
    tool: str | None
    ok: bool | None
    actor: str | None
    _raw: dict[str, object]  # the texts as given
    _masked: dict[str, str | None]  # each text clipped and masked, once it was read

    def __init__(
        self,
        index: int,
        type: StepType,  # the documented name of the field
        tool: str | None = None,
        args: object = None,
        result: object = None,
        ok: bool | None = None,
        text: object = None,
        actor: str | None = None,
    ) -> None:
        for name, value in (
            ("index", index), ("type", type), ("tool", tool), ("ok", ok), ("actor", actor),
            ("_raw", {"args": args, "result": result, "text": text}), ("_masked", {}),
        ):  # fmt: skip
            object.__setattr__(self, name, value)

    def _read(self, name: str) -> str | None:
        masked: dict[str, str | None] = self._masked
        if name not in masked:
            masked[name] = _text(self._raw[name])
        return masked[name]

    @property
    def args(self) -> str | None:
        return self._read("args")

    @property
    def result(self) -> str | None:
        return self._read("result")

    @property
    def text(self) -> str | None:
        return self._read("text")

    def raw_record(self) -> list[object]:
        """The step as the check process gets it (judges/checks/wall.py): its texts clipped
        as they would be read here, masked there."""
        raw = self._raw
        return [
            self.index, self.type, self.tool, _clipped(raw["args"]), _clipped(raw["result"]),
            self.ok, _clipped(raw["text"]), self.actor,
        ]  # fmt: skip

    def _public(self) -> tuple[object, ...]:
        return (
            self.index, self.type, self.tool, self.args, self.result, self.ok, self.text,
            self.actor,
        )  # fmt: skip

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a StepView is read-only: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StepView) and self._public() == other._public()

    def __hash__(self) -> int:
        return hash(self._public())

    def __repr__(self) -> str:  # the masked texts, as every output shows them
        names = ("index", "type", "tool", "args", "result", "ok", "text", "actor")
        return (
            "StepView("
            + ", ".join(f"{n}={v!r}" for n, v in zip(names, self._public(), strict=True))
            + ")"
        )


@dataclass(frozen=True)
class Run:
    """One run as a check reads it: `goal`, `agent_name`, `agent_version`, `final_answer`
    (None: the run has none yet, or ended without one), `steps` in order."""

    request_id: str
    goal: str | None
    agent_name: str | None
    agent_version: str | None
    final_answer: str | None
    steps: tuple[StepView, ...]

    def calls(self, tool: str | None = None) -> list[StepView]:
        """The tool calls, of `tool` only when given."""
        return [s for s in self.steps if s.type == "tool_call" and (tool is None or s.tool == tool)]


def step_view(step: object) -> StepView | None:
    if isinstance(step, ToolCall):
        return StepView(
            step.step_index,
            "tool_call",
            tool=step.tool,
            args=step.args_summary,
            result=step.error if not step.success and step.error else step.result_preview,
            ok=step.success,
            actor=step.actor,
        )
    if isinstance(step, ReasoningStep):
        said = step.intent_summary or step.observation_summary or step.action
        return StepView(step.step_index, "reasoning_step", text=said, actor=step.actor)
    if isinstance(step, UserMessage):
        return StepView(step.step_index, "user_message", text=step.text, actor=step.actor)
    if isinstance(step, Iteration):
        return StepView(
            step.step_index,
            "iteration",
            text=step.response,
            result=step.observation,
            ok=step.exec_success,
            actor=step.actor,
        )
    return None


def run_of(window: Window) -> Run:
    """The view of a window (closed, or open up to its latest step)."""
    final: FinalResponse | None = window.final
    steps = tuple(v for v in (step_view(s) for s in window.steps) if v is not None)
    return Run(
        request_id=window.request_id,
        goal=_text(window.task.goal) if window.task else None,
        agent_name=window.first("agent_name"),
        agent_version=window.first("agent_version"),
        final_answer=None if final is None else _text(final.output),
        steps=steps,
    )


@dataclass
class RunView:
    """A run's view kept up to date as its events arrive, for the checks that run on each new
    step: each step is made into a StepView once, where `run_of` would read every stored step
    again at every step. The steps are in `run_of`'s order (by step_index, then arrival).

    Bounded as the window is (streams/worker/windows.py), so a check in flight reads the steps
    a check on the closed run reads: beyond the step limit a step is kept in detail while it is
    one of the last `tail_steps`, then as its stub (`add`'s `stub`: a tool call's name and
    outcome; nothing, for a user message or a reasoning step without an error)."""

    request_id: str
    goal: str | None = None
    agent_name: str | None = None
    agent_version: str | None = None
    steps: list[StepView] = field(default_factory=list)
    tail_steps: int = 0  # beyond the step limit, the last ones kept in detail
    _indexes: list[int] = field(default_factory=list)
    _agent: RunAgent = field(default_factory=RunAgent)
    # the steps beyond the limit kept in detail: (their view, what replaces it once it is not
    # one of the last `tail_steps` any more)
    _tail: deque[tuple[StepView, Callable[[], Event | None]]] = field(default_factory=deque)

    def add(self, event: Event, stub: Callable[[], Event | None] | None = None) -> StepView | None:
        """One new event of the run (the worker gives each once); `stub`: the event is beyond
        the step limit, and this makes what the window keeps of it. The step's view as the
        checks read it now (None: the event is no step)."""
        if isinstance(event, TaskStarted) and self.goal is None:
            self.goal = _text(event.goal)
        self._agent.see(event.agent_name, task=isinstance(event, TaskStarted))
        self.agent_name = self._agent.name or self.agent_name
        self.agent_version = self.agent_version or event.agent_version
        if stub is not None and self.tail_steps <= 0:
            kept = stub()  # nothing beyond the limit is kept in detail
            view = None if kept is None else step_view(kept)
        else:
            view = step_view(event)
        if view is None:
            return None
        self._insert(view)
        if stub is not None and self.tail_steps > 0:
            self._tail.append((view, stub))
            if len(self._tail) > self.tail_steps:
                old, make = self._tail.popleft()
                kept = make()
                self._replace(old, None if kept is None else step_view(kept))
        return view

    def _insert(self, view: StepView) -> None:
        at = bisect_right(self._indexes, view.index)
        self._indexes.insert(at, view.index)
        self.steps.insert(at, view)

    def _replace(self, old: StepView, new: StepView | None) -> None:
        at = bisect_left(self._indexes, old.index)
        while at < len(self.steps) and self.steps[at] is not old:
            at += 1
        if at == len(self.steps):
            return
        if new is None:
            del self.steps[at]
            del self._indexes[at]
        else:
            self.steps[at] = new

    def run(self) -> Run:
        """The run so far (no final answer yet)."""
        return Run(
            self.request_id, self.goal, self.agent_name, self.agent_version, None, tuple(self.steps)
        )
