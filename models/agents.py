"""Which agent a run belongs to, decided one way everywhere, and the name of "no agent".

A run's agent is the `agent_name` of its `task_started` event; until that event arrives, or in
a run without one, the first `agent_name` to arrive. The task names the agent the request was
given to: with OpenTelemetry input, where a nested agent's spans are exported (and arrive)
before their parent's, the first name to arrive is often a sub-agent's, and the task (the root
span) corrects it. Budgets, checks, loop policies and normals in flight, the verdict's
`agent_name`, and what the run teaches its agent's normal all read this one rule.
"""

from __future__ import annotations

from dataclasses import dataclass

# The group of runs that carry no agent name: in tallies, normals, the explorer and /metrics.
NO_AGENT = "(no agent name)"


def group_of(agent_name: str | None) -> str:
    return agent_name or NO_AGENT


@dataclass
class RunAgent:
    """The rule, fed each event's `agent_name` in arrival order."""

    task: str | None = None  # the task_started event's
    first: str | None = None  # the first to arrive
    name: str | None = None  # the run's agent: the task's, else the first (read on every event)

    def see(self, agent_name: object, *, task: bool) -> None:
        if not agent_name:
            return
        if task and self.task is None:
            self.task = str(agent_name)
        if self.first is None:
            self.first = str(agent_name)
        self.name = self.task or self.first
