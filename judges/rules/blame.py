"""Where a run went wrong: the step most likely responsible, and who took it, from what the rules
found; or an abstention when nothing in the trace points at a step.

Evidence, strongest first, and the earliest step of the strongest kind wins (a failure is
decided where it first shows, not where it ends):
- a step that points at itself: a failure never made good, the first call of a loop of
  identical calls, a state change the conversation did not confirm (prior 0.6);
- the final answer, when what it says is the failure: a claim the trace contradicts, an action
  claimed but never done (0.4); an answer that gives up (a placeholder or stock answer, an
  admitted failure, planned steps left out) is a symptom: the run's first failure is blamed if
  it had one, else the answer, weakly;
- weak signs: a failure the run went on from, the step a limit stopped it at, the last step of
  a run with no final response (0.25).
A failed tool call whose step was written by another agent (a code executor running what the
agent before it wrote, as in multi-agent chats) is that agent's: the step blamed is the one that
wrote it. The priors are orders of strength, not calibrated probabilities; how often each is
right is measured (BENCHMARKS.md: blame). Pure: the same window, the same blame.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracejudge.judges.masking.clipping import quote_whole
from tracejudge.judges.rules.conversation import unconfirmed_calls
from tracejudge.judges.rules.endings import limit_call
from tracejudge.models.events import ReasoningStep, ToolCall
from tracejudge.models.outputs import Blame, FailedStep
from tracejudge.models.window import Window

STRONG, ANSWER, WEAK = 0.6, 0.4, 0.25
ANSWER_RULES = {
    "claim_contradicts_result": "the final claim contradicts the last result",
    "claim_without_call": "the answer claims an action no successful call did",
    "placeholder_answer": "the answer is a placeholder",
    "generic_answer": "the answer is a stock phrase, not a result",
    "clarification_answer": "the answer only asks for clarification",
    "admitted_failure": "the answer admits an attempt failed",
    "pending_action": "the answer leaves the action pending",
    "says_work_remains": "the answer says work remains",
    "handoff": "the request was handed to a human",
    "planned_step_not_attempted": "the run answered before its planned steps were done",
    "confirmed_not_done": "the user's confirmed request was not carried out",
}
# the answer's own mistake: it says what did not happen (other answer findings are symptoms)
FALSE_CLAIMS = ("claim_contradicts_result", "claim_without_call")
LOOP_RUN = 3  # as the loop rule: the same call this many times in a row


@dataclass(frozen=True)
class _Candidate:
    step: object  # the step itself: a tool call, a reasoning step, the final response
    index: int | None
    reason: str
    confidence: float


def blame_of(window: Window, failed: list[FailedStep], findings: list[tuple[str, str]]) -> Blame:
    """The rules' blame for this run (attached to a verdict only when it is not a clean pass)."""
    rules = {rule for rule, _ in findings}
    strong = _strong(window, failed, rules)
    if strong:
        return _named(min(strong, key=lambda c: (c.index is None, c.index or 0)), window)
    answer = [(rule, why) for rule, why in ANSWER_RULES.items() if rule in rules]
    weak = _weak(window, rules)
    if answer and window.final is not None:
        rule, why = answer[0]
        if rule not in FALSE_CLAIMS and weak is not None and weak.index is not None:
            # giving up, a placeholder, steps left out: what the answer shows went wrong
            # before it, where the run first failed
            return _named(weak, window)
        reason = f"{why}: {quote_whole(dict(findings).get(rule, ''), 120)}".rstrip(": ")
        sure = ANSWER if rule in FALSE_CLAIMS else WEAK  # a symptom with no cause in sight
        return _named(_Candidate(window.final, _final_index(window), reason, sure), window)
    if weak is not None:
        return _named(weak, window)
    return Blame(
        abstain=True,
        reason="no step in the trace shows the failure: no failed call, loop, unconfirmed "
        "change or contradicted claim",
        source="rules",
    )


def _strong(window: Window, failed: list[FailedStep], rules: set[str]) -> list[_Candidate]:
    calls = {c.step_index: c for c in window.tool_calls}
    found = [
        _Candidate(
            calls[f.index],
            f.index,
            f"{f.tool or 'the call'} failed and was never made good: {quote_whole(f.reason, 120)}",
            STRONG,
        )
        for f in failed[:1]
        if f.index in calls
    ]
    steps = {s.step_index: s for s in window.steps}
    for f in failed:
        if f.tool is None and f.index not in calls:  # the run ended by an error, at this step
            step = steps.get(f.index) if f.index is not None else None
            where = step if step is not None else window.final
            index = f.index if step is not None else _final_index(window)
            found.append(_Candidate(where, index, quote_whole(f.reason, 160), STRONG))
    if "identical_call_loop" in rules:
        start = _loop_start(window)
        if start is not None:
            found.append(
                _Candidate(
                    start,
                    start.step_index,
                    f"a loop of identical {start.tool} calls began here",
                    STRONG,
                )
            )
    if "change_without_go_ahead" in rules:
        changes = unconfirmed_calls(window)
        if changes:
            change = changes[0][0]
            found.append(
                _Candidate(
                    change,
                    change.step_index,
                    f"{change.tool} changed state without the user's go-ahead",
                    STRONG,
                )
            )
    return found


def _weak(window: Window, rules: set[str]) -> _Candidate | None:
    # a limit call (the harness ending the run) is not the agent's failure
    first_failed = next((c for c in window.tool_calls if not c.success and not limit_call(c)), None)
    if first_failed is not None:
        error = quote_whole(first_failed.error or "no error given", 120)
        return _Candidate(
            first_failed,
            first_failed.step_index,
            f"the first failure of the run ({first_failed.tool}: {error}), which it went on from",
            WEAK,
        )
    if window.final is None and window.steps:
        last = window.steps[-1]
        return _Candidate(last, last.step_index, "the last step before the run went quiet", WEAK)
    if "stopped_at_limit" in rules and window.steps:
        last = window.steps[-1]
        return _Candidate(last, last.step_index, "the step the run's limit stopped it at", WEAK)
    return None


def _named(candidate: _Candidate, window: Window) -> Blame:
    """The candidate as a Blame: a failed call another agent wrote is blamed on that agent's
    step; the actor is the step's own, else its tool, else the request's agent."""
    step, index, reason = candidate.step, candidate.index, candidate.reason
    if isinstance(step, ToolCall) and not step.success:
        author = _author(window, step)
        if author is not None:
            reason = (
                f"step {author.step_index} ({author.actor}) wrote the call that failed: {reason}"
            )
            step, index = author, author.step_index
    actor = actor_of(window, step)
    return Blame(
        step_index=index,
        actor=actor,
        reason=reason,
        confidence=candidate.confidence,
        source="rules",
    )


def multi_agent(window: Window) -> bool:
    """Two or more agents spoke in the run (its reasoning steps name two actors): only then is
    a step's actor who to blame. In a one-agent run an actor is a framework's node (LangGraph's
    `tools`) and a tool is a tool: the agent is the one to blame."""
    speakers: set[str] = set()
    for step in window.steps:
        if isinstance(step, ReasoningStep) and step.actor:
            speakers.add(step.actor)
            if len(speakers) > 1:
                return True
    return False


def actor_of(window: Window, step: object, multi: bool | None = None) -> str | None:
    """Who took `step`, as blame names it: in a multi-agent run the step's actor (else its
    tool's caller is unknown: its tool), else the request's agent. `multi`: `multi_agent`'s
    answer, when the caller asks for many steps."""
    agent = window.first("agent_name")
    if multi_agent(window) if multi is None else multi:
        own = getattr(step, "actor", None)
        return own or (step.tool if isinstance(step, ToolCall) else None) or agent
    return agent or next(
        (s.actor for s in window.steps if isinstance(s, ReasoningStep) and s.actor), None
    )


def _author(window: Window, call: ToolCall) -> ReasoningStep | None:
    """The reasoning step just before `call`, when another actor took it: in a multi-agent run
    the executor runs what that agent wrote."""
    before = None
    for step in window.steps:
        if step is call:
            break
        before = step
    if (
        isinstance(before, ReasoningStep)
        and before.actor
        and call.actor
        and before.actor != call.actor
    ):
        return before
    return None


def _loop_start(window: Window) -> ToolCall | None:
    run, previous, start = 0, None, None
    for call in window.tool_calls:
        signature = (call.tool, call.args_summary)
        if signature == previous and call.args_summary is not None:
            run += 1
        else:
            run, start = 1, call
        previous = signature
        if run >= LOOP_RUN:
            return start
    return None


def _final_index(window: Window) -> int:
    if window.final is not None and window.final.step_index is not None:
        return window.final.step_index
    # an unnumbered final answer comes after every step (after the task, numbered 0, if alone)
    return max((s.step_index for s in window.steps), default=0) + 1
