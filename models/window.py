"""A closed request: the per-request window as the judges see it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from tracejudge.models.events import (
    Event,
    FinalResponse,
    Iteration,
    Outcome,
    ReasoningStep,
    SessionEnd,
    TaskStarted,
    ToolCall,
    UserMessage,
)

ClosedBy = Literal["final_response", "idle_timeout"]
_OUTSIDE = (Outcome, SessionEnd)  # events the worker routes apart, never a window's
# an intervention as the window keeps it: (kind, crossed, action, step index of the crossing)
Fired = tuple[str, str, str, int | None]
Step = UserMessage | ReasoningStep | ToolCall | Iteration


class Window(BaseModel):
    """Everything tracejudge kept about one request, in step order."""

    request_id: str
    task: TaskStarted | None = None
    steps: list[Step] = Field(default_factory=list)
    final: FinalResponse | None = None
    closed_by: ClosedBy
    step_count: int = 0
    steps_dropped: int = 0
    early_stops: list[tuple[str, int]] = Field(
        default_factory=list, description="(action, iteration) decided while the window was open"
    )
    interventions: list[Fired] = Field(
        default_factory=list, description="Interventions sent while the window was open"
    )
    events_over_cap: int = Field(
        0, description="Events past the cap on events per request: counted, not read"
    )
    agent_name: str | None = Field(
        None,
        description="The run's agent by the one rule of models/agents.py (None: found by "
        "`first`, for a window built without `assemble_window`)",
    )

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [s for s in self.steps if isinstance(s, ToolCall)]

    @property
    def user_turns(self) -> list[UserMessage]:
        return [s for s in self.steps if isinstance(s, UserMessage)]

    @property
    def reasoning(self) -> list[ReasoningStep]:
        return [s for s in self.steps if isinstance(s, ReasoningStep)]

    @property
    def iterations(self) -> list[Iteration]:
        return [s for s in self.steps if isinstance(s, Iteration)]

    def first(self, field: str) -> str | None:
        """First non-empty value of a common field (session_key, agent_name, task_id); the
        agent by the one rule (models/agents.py) where the window was assembled."""
        if field == "agent_name" and self.agent_name:
            return self.agent_name
        for event in (self.task, *self.steps, self.final):
            value = getattr(event, field, None) if event is not None else None
            if value:
                return str(value)
        return None


def assemble_window(
    request_id: str,
    events: list[Event],
    *,
    closed_by: ClosedBy,
    step_count: int,
    steps_dropped: int,
    early_stops: list[tuple[str, int]] | None = None,
    interventions: list[Fired] | None = None,
    events_over_cap: int = 0,
) -> Window:
    """Build a Window from validated events in arrival order, ordering steps by step_index.

    The first task_started and the first final_response count; later ones are duplicates.
    """
    task: TaskStarted | None = None
    final: FinalResponse | None = None
    steps: list[tuple[int, int, Step]] = []
    for arrival, event in enumerate(events):
        if isinstance(event, TaskStarted):
            task = task or event
        elif isinstance(event, FinalResponse):
            final = final or event
        elif not isinstance(event, _OUTSIDE):  # never in a window: routed apart
            steps.append((event.step_index, arrival, event))
    steps.sort(key=lambda item: (item[0], item[1]))
    return Window(
        request_id=request_id,
        task=task,
        steps=[s for _, _, s in steps],
        final=final,
        closed_by=closed_by,
        step_count=step_count,
        steps_dropped=steps_dropped,
        early_stops=early_stops or [],
        interventions=interventions or [],
        events_over_cap=events_over_cap,
        # the one rule (models/agents.py): the task's, else the first to arrive
        agent_name=(task.agent_name if task is not None else None)
        or next((e.agent_name for e in events if e.agent_name), None),
    )
