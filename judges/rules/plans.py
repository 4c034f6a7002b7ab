"""A run's declared plan (`task_started.planned_steps`) matched against the calls it made.

A planned step that is one identifier ("search_flights", "git.commit") names a tool and is
matched to calls by name; a step written in words ("check the order status") cannot be, and
the calls no named step claims stand for those, in the order they came.
"""

from __future__ import annotations

import re

from tracejudge.judges.rules.endings import limit_call
from tracejudge.models.events import ToolCall
from tracejudge.models.window import Window


def names_a_tool(step: str) -> bool:
    """A planned step that is one identifier names a tool; anything with spaces describes a
    step in words."""
    return re.fullmatch(r"[\w.:/-]+", step.strip()) is not None


def norm(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z\u4e00-\u9fff]+", " ", text.lower()).split())


def same_step(planned: str, tool: str) -> bool:
    """Whether a call of `tool` attempts the planned step (both normalised): the same name, or
    one inside the other (`ping_db` and `ping_db_replica`, `refund` and `refund_order`)."""
    return bool(tool) and (tool == planned or tool in planned or planned in tool)


def failed_planned_steps(window: Window) -> list[ToolCall]:
    """The last failed attempt of each declared step that was never made good: no later call of
    the same step succeeded. Steps named as tools are followed by name. A call that no named
    step claims is an attempt of a step described in words, or of work outside the plan; it
    was made good when a later call of the same tool succeeded. Calls by which a harness
    stopped the run (a limit) are not the agent's attempts."""
    if window.task is None or not window.task.planned_steps:
        return []
    named = [norm(p) for p in window.task.planned_steps if names_a_tool(p)]
    last: dict[str, ToolCall] = {}  # a step (or an unclaimed tool) -> its latest attempt
    for call in window.tool_calls:
        if limit_call(call):
            continue
        tool = norm(call.tool)
        steps = [p for p in named if same_step(p, tool)] or [f"tool:{tool}"]
        for step in steps:
            last[step] = call
    failed = {c.step_index: c for c in last.values() if not c.success}
    return [failed[i] for i in sorted(failed)]
