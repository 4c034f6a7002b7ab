"""A verdict that is not a clean pass, as the failure mode it belongs to: a signature made from
what the verdict already knows, without a model call, and a name a person reads.

In order, the first that applies: a tool's call that failed and was never made good (the tool,
its error's template, the tool called before it), an intervention that ended the run (its kind
and what it crossed), a team's check that failed, the most specific rule that fired, the judge's
blame (its reason's template, where a judge ran), else the quadrant the verdict fell in. Two
verdicts of one agent with the same signature are the same mode; a mode's key is stable across
processes and restarts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracejudge.judges.modes.errors import template
from tracejudge.models.ids import stable_id

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
    "pending_action",
    "planned_step_not_attempted",
    "says_work_remains",
    "placeholder_answer",
    "no_final_response",
    "patch_adds_only",
    "compound_trouble",
)
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
}


@dataclass(frozen=True)
class Signature:
    kind: str  # tool_error, intervention, check, rule, judge, other
    tool: str | None = None
    error: str | None = None  # the error's template
    after: str | None = None  # the tool called before the failing one
    rule: str | None = None  # a rule, a check's name, an intervention's kind and crossing

    def key(self, agent: str | None) -> str:
        """The mode's id for an agent: the same signature, the same id, anywhere."""
        parts = (self.kind, self.tool, self.error, self.after, self.rule)
        return stable_id("mode", agent or "", *(p or "" for p in parts))

    def name(self) -> str:
        """In words: "refund_order fails with HTTP 503 after lookup_order"."""
        if self.kind == "tool_error":
            said = f"{self.tool} fails" + (f" with {self.error}" if self.error else "")
            return said + (f" after {self.after}" if self.after else "")
        if self.kind == "intervention":
            return f"stopped by a {self.rule}"
        if self.kind == "check":
            return f"the team's check {self.rule} fails"
        if self.kind == "rule":
            return RULE_WORDS.get(self.rule or "", self.rule or "a rule fires")
        if self.kind == "judge":
            return f"the judge: {self.error}"
        return self.rule or "fails"


def signature_of(evaluation: Mapping[str, Any], tools: Sequence[str] = ()) -> Signature | None:
    """The mode of a verdict that is not a clean pass (None for a clean pass). `tools`: the
    run's tool calls in step order, when known (the worker's window: "after" comes from it)."""
    if evaluation.get("passed") and evaluation.get("success") and not evaluation.get("incomplete"):
        return None
    failed = evaluation.get("failed_steps") or []
    if failed:
        step = failed[0]
        tool = str(step.get("tool") or "") or None
        return Signature(
            "tool_error",
            tool=tool,
            error=template(step.get("reason")),
            after=_before(tools, tool),
        )
    for made in evaluation.get("interventions") or []:
        if made.get("action") == "stop" and made.get("stopped_after"):
            return Signature("intervention", rule=f"{made.get('kind')} {made.get('crossed')}")
    findings = [f for f in evaluation.get("findings") or [] if isinstance(f, Mapping)]
    fired = {str(f.get("rule")) for f in findings}
    checks = sorted(r.removeprefix("check:") for r in fired if r.startswith("check:"))
    if checks:
        return Signature("check", rule=checks[0])
    for rule in RULES:
        if rule in fired:
            return Signature("rule", rule=rule)
    blame = evaluation.get("blame") or {}
    if isinstance(blame, Mapping) and blame.get("source") == "judge" and blame.get("reason"):
        return Signature("judge", error=template(str(blame["reason"])))
    if fired:
        return Signature("rule", rule=sorted(fired)[0])
    return Signature("other", rule=_quadrant(evaluation))


def _before(tools: Sequence[str], tool: str | None) -> str | None:
    """The tool called before the failing one (not itself), from the run's calls in order."""
    if not tools or tool is None:
        return None
    at = [n for n, t in enumerate(tools) if t == tool]
    if not at:
        return None
    earlier = [t for t in tools[: at[0]] if t != tool]
    return earlier[-1] if earlier else None


def _quadrant(evaluation: Mapping[str, Any]) -> str:
    if not evaluation.get("success"):
        return "failed steps"
    if evaluation.get("incomplete"):
        return "left incomplete"
    return "scored below the threshold"
