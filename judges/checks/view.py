"""The run a check reads: a read-only view of a window, texts clipped and masked like every
output, so a check sees what the worker holds and nothing a log line could not show."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracejudge.judges.masking.clipping import clip_whole
from tracejudge.judges.masking.redact import mask
from tracejudge.models.events import FinalResponse, Iteration, ReasoningStep, ToolCall, UserMessage
from tracejudge.models.window import Window

TEXT_LIMIT = 2_000  # per text of a step, as the contract's summaries

StepType = Literal["tool_call", "reasoning_step", "user_message", "iteration"]


def _text(value: object) -> str | None:
    if value is None or value == "":
        return None
    return mask(clip_whole(str(value), TEXT_LIMIT))


@dataclass(frozen=True)
class StepView:
    """One step: `index` (its step_index), `type`, `tool` (tool calls), `args` and `result`
    (text), `ok` (True/False for a tool call or an iteration, else None), `text` (what a
    reasoning step or a user message says), `actor` (who took it, in a multi-agent run)."""

    index: int
    type: StepType
    tool: str | None = None
    args: str | None = None
    result: str | None = None
    ok: bool | None = None
    text: str | None = None
    actor: str | None = None


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
            args=_text(step.args_summary),
            result=_text(step.error if not step.success and step.error else step.result_preview),
            ok=step.success,
            actor=step.actor,
        )
    if isinstance(step, ReasoningStep):
        said = step.intent_summary or step.observation_summary or step.action
        return StepView(step.step_index, "reasoning_step", text=_text(said), actor=step.actor)
    if isinstance(step, UserMessage):
        return StepView(step.step_index, "user_message", text=_text(step.text), actor=step.actor)
    if isinstance(step, Iteration):
        return StepView(
            step.step_index,
            "iteration",
            text=_text(step.response),
            result=_text(step.observation),
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
