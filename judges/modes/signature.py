"""A verdict that is not a clean pass, as the failure mode it belongs to: a signature made from
what the verdict already knows, without a model call, and a name a person reads. A pass that a
telling rule or a team's check found something on is not clean (a change made without the
user's yes often scores above the threshold): it has a mode too, and outcomes say how often
such a mode is a false alarm.

In order, the first that applies: a tool's call that failed and was never made good (the tool,
its error's template, the tool called before it), an intervention that ended the run (its kind
and what it crossed), a team's check that failed, the most specific rule that fired, the judge's
blame (the step it names, where a judge ran; its reason's template said, not keyed), else the
quadrant the verdict fell in; the blamed step's actor or tool where it is not the agent. Two
verdicts of one agent with the same signature are the same mode; a mode's key is stable across
processes and restarts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tracejudge.judges.modes.errors import TEMPLATE_CHARS, template
from tracejudge.models.ids import stable_id
from tracejudge.models.modes import NAME_CHARS, FailureMode, ModeKind

# the rules, most telling first: a run that crashed says more than one that was long
RULES = (
    "run_error",
    "looped_then_gave_up",
    "identical_call_loop",
    "stopped_by_intervention",
    "stopped_at_limit",
    "unrecovered_failure",
    "last_attempt_failed",
    "change_without_go_ahead",
    "claim_without_call",
    "claim_contradicts_result",
    "confirmed_not_done",
    "pending_action",
    "admitted_failure",
    "handoff",
    "planned_step_not_attempted",
    "says_work_remains",
    "placeholder_answer",
    "no_final_response",
    "patch_adds_only",
    "compound_trouble",
    "generic_answer",
    "clarification_answer",
)
# rules about one call: the finding whose evidence starts with that call's tool ("<tool> ...")
CALLED_IN = {
    "identical_call_loop": "identical_call_loop",
    "looped_then_gave_up": "identical_call_loop",
    "change_without_go_ahead": "change_without_go_ahead",
}
TOOL_CHARS = 80
# a pass with one of these is clean: they read the answer's words, and fire on good runs too
TELLING = frozenset(RULES) - {"compound_trouble", "generic_answer", "clarification_answer"}
# what the judge found, by the quadrant its verdict fell in
JUDGE_WORDS = {
    "failed steps": "the judge finds failed steps",
    "left incomplete": "the judge finds it left incomplete",
    "scored below the threshold": "the judge scores it below the threshold",
}
# what each rule means, in words
RULE_WORDS = {
    "run_error": "the run ends in an error",
    "looped_then_gave_up": "loops, then gives up",
    "identical_call_loop": "repeats the same call",
    "stopped_by_intervention": "is stopped while it runs",
    "stopped_at_limit": "stops at its step or cost limit",
    "unrecovered_failure": "a failed call is never made good",
    "last_attempt_failed": "its last attempt fails",
    "change_without_go_ahead": "changes state without the user's go-ahead",
    "claim_without_call": "claims what no call did",
    "pending_action": "leaves an action it promised pending",
    "planned_step_not_attempted": "skips a planned step",
    "says_work_remains": "says work remains",
    "placeholder_answer": "answers with a placeholder",
    "no_final_response": "never answers",
    "patch_adds_only": "its patch only adds code",
    "compound_trouble": "runs into trouble on several fronts",
    "claim_contradicts_result": "claims what its last result contradicts",
    "confirmed_not_done": "does not do what the user confirmed",
    "admitted_failure": "admits an attempt failed",
    "handoff": "hands the request to a human",
    "generic_answer": "answers with a stock phrase",
    "clarification_answer": "only asks for clarification",
}


def _get(item: Any, name: str) -> Any:
    """A field of an evaluation (or a part of one), as a model or as its JSON."""
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def key_of(
    agent: str | None, kind: str, tool: str | None, error: str | None, rule: str | None
) -> str:
    """The mode's id for an agent: the same signature, the same id, in any process. The tool
    called before a failing one is not part of it: an outage fails a tool whatever came first."""
    return stable_id("mode", agent or "", kind, tool or "", error or "", rule or "")


def name_of(
    kind: str, tool: str | None, error: str | None, rule: str | None, after: str | None = None
) -> str:
    """In words: "refund_order fails with HTTP 503 after lookup_order"."""
    if kind == "tool_error":
        said = f"{tool or 'a tool'} fails" + (f" with {error}" if error else "")
        return said + (f" after {after}" if after else "")
    at = f" (at {tool})" if tool else ""
    if kind == "intervention":
        return f"stopped by a {rule}{at}"
    if kind == "check":
        return f"the team's check {rule} fails{at}"
    if kind == "rule":
        words = RULE_WORDS.get(rule or "", rule or "a rule fires")
        return words + (f": {error}" if error else "") + at
    if kind == "judge":
        return JUDGE_WORDS.get(rule or "", "the judge fails it") + at
    return (rule or "fails") + at


def mode_of(evaluation: Any, called_before: Mapping[str, str] | None = None) -> FailureMode | None:
    """The failure mode of a verdict that is not a clean pass (None for a clean pass), from an
    Evaluation or its JSON. `called_before`: each tool's preceding call (`tools_before`)."""
    passed, success = _get(evaluation, "passed"), _get(evaluation, "success")
    if passed and success and not _get(evaluation, "incomplete") and not _telling(evaluation):
        return None  # a clean pass: nothing a rule or a team's check held against it
    agent = _get(evaluation, "agent_name")
    kind, tool, error, rule = _signature(evaluation, agent)
    tool, error, rule = _clip(tool), _clip(error), _clip(rule)
    after = None
    if kind == "tool_error" and tool is not None and called_before:
        after = _clip(called_before.get(tool))
    # the judge's reason is prose: said, not keyed (two readings of one failure seldom share
    # their words); the quadrant and the step it blames group them
    keyed = None if kind == "judge" else error
    return FailureMode(
        key=key_of(agent, kind, tool, keyed, rule),
        name=name_of(kind, tool, error, rule, after)[:NAME_CHARS],
        kind=kind,
        tool=tool,
        error=error,
        after=after,
        rule=rule,
    )


def _telling(evaluation: Any) -> bool:
    """A rule of RULES or a team's check found something on it (a pass may still hold one: a
    change made without the user's yes scores above most thresholds)."""
    for found in _get(evaluation, "findings") or []:
        rule = str(_get(found, "rule"))
        if rule in TELLING or rule.startswith("check:"):
            return True
    return False


def _clip(text: str | None) -> str | None:
    return None if text is None else text[:TEMPLATE_CHARS]


def _signature(
    evaluation: Any, agent: str | None
) -> tuple[ModeKind, str | None, str | None, str | None]:
    failed = _get(evaluation, "failed_steps") or []
    if failed:
        step = failed[0]
        tool = str(_get(step, "tool") or "") or None
        if tool is None:  # no call failed: the run itself ended in an error, at this step
            rule = "run_error" if _evidence(evaluation, "run_error") else "unrecovered_failure"
            said = _evidence(evaluation, "run_error") or _get(step, "reason")
            return "rule", None, template(said), rule
        return "tool_error", tool, template(_get(step, "reason")), None
    blame = _get(evaluation, "blame")
    actor = _get(blame, "actor") if blame is not None else None
    actor = None if not actor or actor == agent else str(actor)
    fired = {str(_get(f, "rule")) for f in _get(evaluation, "findings") or []}
    if "stopped_by_intervention" in fired:  # a stop ended the run (not one sent after its answer)
        for made in _get(evaluation, "interventions") or []:
            if _get(made, "action") == "stop" and _get(made, "stopped_after"):
                said = f"{_get(made, 'kind')} {_get(made, 'crossed')}"
                return "intervention", actor, None, said
    checks = sorted(r.removeprefix("check:") for r in fired if r.startswith("check:"))
    if checks:
        return "check", actor, None, checks[0]
    for rule in RULES:
        if rule in fired:
            return "rule", actor or _called(evaluation, rule), None, rule
    if blame is not None and _get(blame, "source") == "judge" and _get(blame, "reason"):
        return "judge", actor, template(str(_get(blame, "reason"))), _quadrant(evaluation)
    if fired:
        return "rule", actor, None, sorted(fired)[0]
    return "other", actor, None, _quadrant(evaluation)


def _evidence(evaluation: Any, rule: str) -> str | None:
    """What the rule's finding read, where it fired."""
    for found in _get(evaluation, "findings") or []:
        if _get(found, "rule") == rule:
            return str(_get(found, "evidence") or "") or None
    return None


def _called(evaluation: Any, rule: str) -> str | None:
    """The call a rule is about (the call a loop repeats, the change made without a yes),
    from its evidence: a loop on one tool is a mode of its own, apart from loops on others."""
    source = CALLED_IN.get(rule)
    words = (_evidence(evaluation, source) or "").split(maxsplit=1) if source else []
    return words[0][:TOOL_CHARS] if words and words[0].isidentifier() else None


def tools_before(tools: Iterable[str | None], most: int = 64) -> dict[str, str]:
    """Each tool's preceding call: the other tool called last before its last run of calls
    (a failure never made good is a tool's last call). At most `most` tools."""
    before: dict[str, str] = {}
    last: str | None = None
    for tool in tools:
        if tool is None:
            continue
        if last is not None and last != tool and (tool in before or len(before) < most):
            before[tool] = last
        last = tool
    return before


def _quadrant(evaluation: Any) -> str:
    if not _get(evaluation, "success"):
        return "failed steps"
    if _get(evaluation, "incomplete"):
        return "left incomplete"
    return "scored below the threshold"
