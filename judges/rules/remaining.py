"""The work a run left undone, named from its trace: the failed call never made good (its tool,
arguments and error), the planned step never attempted, the action claimed but never done, the
user's request left pending. What a reflection request hands the follow-up run, whose planned
steps these become: a follow-up that does the step clears it.

Never the answer's prose: "I could not refund the order." says that something is left, the
trace says what (`refund`, its arguments, `payment gateway timeout`). The answer's words only
count as evidence in `why` when the trace names nothing. Pure: the same window, the same list.
"""

from __future__ import annotations

from tracejudge.judges.masking.clipping import quote_whole
from tracejudge.models.events import ToolCall
from tracejudge.models.outputs import FailedStep, RemainingStep
from tracejudge.models.window import Window

MAX_LEFT = 10  # a follow-up's plan, and a line each in `show`
ARGS_CHARS = 120
ERROR_CHARS = 160
# request_pending entries the trace can explain: the answer admits a failure, says work
# remains or leaves an action pending; a failed call of the same run names the work instead
EXPLAINED = ("admits", "says work remains", "leaves the action pending")


def pending(step: str, why: str) -> RemainingStep:
    """The user's request left unanswered or unfinished."""
    return RemainingStep(kind="request_pending", step=step, why=why)


def planned_not_attempted(step: str) -> RemainingStep:
    return RemainingStep(
        kind="planned_step", step=step, why="declared in the plan, never attempted"
    )


def failed_call(call: ToolCall, why: str) -> RemainingStep:
    error = quote_whole(call.error, ERROR_CHARS) if call.error else None
    return RemainingStep(
        kind="failed_call",
        step=call.tool,
        why=why.format(step=call.step_index, error=f"'{error}'" if error else "no error given"),
        step_index=call.step_index,
        tool=call.tool,
        args=quote_whole(call.args_summary, ARGS_CHARS) if call.args_summary else None,
        error=error,
    )


def work_left(
    window: Window,
    failed: list[FailedStep],
    found: list[RemainingStep],
    stopped: RemainingStep | None = None,
) -> list[RemainingStep]:
    """`found` (what the completeness rules left, in their order) with each failure never made
    good first; a pending request a failed call explains gives way to the call. `stopped`: the
    request a stop intervention left pending, which is the why of a pending request (the
    answer's words are then the stop's, not the run's) unless the trace names the work."""
    calls = {c.step_index: c for c in window.tool_calls}
    left = [
        failed_call(calls[f.index], "step {step} failed ({error}) and was never made good")
        for f in failed
        if f.index in calls
    ]
    explained = [
        e for e in found if e.kind == "request_pending" and any(p in e.why for p in EXPLAINED)
    ]
    if explained and not left:
        # the answer owns up to a failure the rules let pass (work went on after it): the
        # calls whose tool never succeeded afterwards are what it is about
        left = [
            failed_call(c, "step {step} failed ({error}); no later call of it succeeded")
            for c in _never_made_good(window)
        ]
    structural = left + [e for e in found if e.kind != "request_pending"]
    unanswered = [stopped] if stopped else [e for e in found if e.kind == "request_pending"]
    rest = unanswered if not structural else []
    seen: set[tuple[str, str]] = set()
    unique = []
    for entry in structural + rest:
        if (entry.kind, entry.step) not in seen:
            seen.add((entry.kind, entry.step))
            unique.append(entry)
    return unique[:MAX_LEFT]


def _never_made_good(window: Window) -> list[ToolCall]:
    """Failed calls no later call of the same tool made good, the last failure of each tool."""
    last_failed: dict[str, ToolCall] = {}
    for call in window.tool_calls:
        if call.success:
            last_failed.pop(call.tool, None)
        else:
            last_failed[call.tool] = call
    return sorted(last_failed.values(), key=lambda c: c.step_index)
