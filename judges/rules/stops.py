"""A run an intervention stopped: whether it stopped after each one it was sent, and the stop
that ended it before its answer, if one did.

A `stop` intervention ended the run when its final response names it (`stopped_by`, which the
client and the framework integrations set), or when the run made no step after the crossing.
Such a run did not reach its goal, unless its final answer came before the stop was sent: the
crossing was the final response itself (a budget its usage or its time crossed), or came after
it in step order, or the final response was made before the crossing event by the run's own
clock. A `steer` never ended a run: the agent was told to change course, not to stop.

Pure: the same window, the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracejudge.models.ids import intervention_id
from tracejudge.models.window import Fired, Window

__all__ = ["Stop", "after_crossing", "stop_id", "stop_that_ended"]


@dataclass(frozen=True)
class Stop:
    """The stop intervention that ended a run before its answer."""

    intervention_id: str
    kind: str  # budget, loop, check
    crossed: str  # the budget's limit, the loop rule, or the team's check
    at_step: int | None  # the crossing event's step
    named: bool  # the final response names it (stopped_by)

    @property
    def after_the_fact(self) -> bool:
        """A team's check stops on the event it reads: the call it flagged had already run. The
        run is judged on what it did, not as one cut short of its goal, and never asked to go
        on (a follow-up could make the same call again)."""
        return self.kind == "check"

    def words(self) -> str:
        if self.kind == "budget":
            what = f"its {self.crossed} budget"
        elif self.kind == "check":
            what = f"the team's check {self.crossed}"
        else:
            what = f"a {self.crossed} loop"
        at = "" if self.at_step is None else f" at step {self.at_step}"
        return f"stopped by tracejudge for {what}{at}"


def stop_id(request_id: str, kind: str, crossed: str = "") -> str:
    """The id of a request's stop: as the worker gave it (models/ids.py)."""
    return intervention_id(request_id, kind, "stop", crossed)


def after_crossing(window: Window, at: int | None, iid: str) -> tuple[int, bool]:
    """(steps the run made after the crossing event, whether it stopped after it). Step indexes
    are the client's, one per event in order, so the steps after a crossing are those between
    it and the final response (which is not a step)."""
    final = window.final
    last = max((s.step_index for s in window.steps), default=0)
    if final is not None and final.step_index is not None:
        last = final.step_index - 1
    after = 0 if at is None else max(0, last - at)
    return after, final is not None and (final.stopped_by == iid or after == 0)


def stop_that_ended(window: Window) -> Stop | None:
    """The first `stop` intervention the run ended on before its final answer; None when no stop
    ended it, or when its answer came before the stop was sent."""
    final = window.final
    if final is None:
        return None
    for fired in window.interventions:
        kind, crossed, action, at = fired
        if action != "stop":
            continue
        iid = stop_id(window.request_id, kind, crossed)
        named = final.stopped_by == iid
        _, stopped = after_crossing(window, at, iid)
        if named or (stopped and not _answered_before(window, fired)):
            return Stop(iid, kind, crossed, at, named)
    return None


def _answered_before(window: Window, fired: Fired) -> bool:
    """The final response came before the stop was sent: the stop goes out on the crossing
    event, so a final response that is that event, or earlier by step order or by the run's
    clock, was made without it."""
    final = window.final
    at = fired[3]
    if final is None:
        return False
    if at is None:  # crossed on an event with no step: the final response (a start crosses none)
        return True
    if final.step_index is not None and final.step_index <= at:
        return True
    crossing = next((s for s in window.steps if s.step_index == at), None)
    if crossing is None or crossing.ts is None or final.ts is None:
        return False
    return final.ts < crossing.ts
