"""A team's check results folded into the rules' verdict, as a built-in rule's would be.

A `fail` fails the run (its score capped below the threshold in use, by `conclude`), a `lower`
costs points, a `note` is only shown and counted. Each is a finding named `check:<name>` with
its version, message and step; a failure that points at a step is the run's blame unless the
rules found a failure never made good earlier. A check that raised or ran past its time limit
is said in the reasons and decides nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracejudge.judges.checks.api import Check, Failure
from tracejudge.judges.masking.clipping import quote_whole
from tracejudge.judges.rules.judge import FLAGGED_CAP, TROUBLED_CAP, RuleVerdict
from tracejudge.models.outputs import Blame

LOWER_COST = 15  # points a `lower` failure costs
CHECK_CONFIDENCE = 0.8  # the team's own rule pointing at a step: stronger than any general one


@dataclass(frozen=True)
class Checked:
    """What a closed run's checks gave: failures found, and the checks that could not say."""

    found: tuple[tuple[Check, Failure], ...] = ()
    broken: tuple[tuple[str, str], ...] = ()  # (check name, "raised" or "timed out")


def with_checks(verdict: RuleVerdict, checked: Checked) -> RuleVerdict:
    if not checked.found and not checked.broken:
        return verdict
    findings = list(verdict.check_findings)
    reasons = list(verdict.reasons)
    score = verdict.rule_score if verdict.rule_exact is None else verdict.rule_exact
    fails = 0
    for check, failure in checked.found:
        findings.append((f"check:{check.name}", failure.message, failure.step))
        if failure.severity == "fail":
            fails += 1
            reasons.append(f"check {check.name} failed: {quote_whole(failure.message, 160)}")
        elif failure.severity == "lower":
            score -= LOWER_COST
            reasons.append(f"check {check.name}: {quote_whole(failure.message, 160)}")
    for name, how in checked.broken:
        reasons.append(f"check {name} {how}: left out of this verdict")
    if fails:
        score = min(score, TROUBLED_CAP)
    score = max(0.0, min(100.0, score))
    return verdict.model_copy(
        update={
            "check_findings": findings,
            "reasons": reasons,
            "rule_exact": score,
            "rule_score": round(score) if not fails else min(round(score), FLAGGED_CAP),
            "failed_checks": verdict.failed_checks + fails,
            "check_versions": {
                **verdict.check_versions,
                **{f"check:{c.name}": c.version for c, _ in checked.found},
            },
            "blame": _blame(verdict, checked) or verdict.blame,
        }
    )


def _blame(verdict: RuleVerdict, checked: Checked) -> Blame | None:
    pointed = [(c, f) for c, f in checked.found if f.severity == "fail" and f.step is not None]
    if not pointed:
        return None
    check, failure = min(pointed, key=lambda cf: cf[1].step or 0)
    rules = verdict.blame
    if (
        rules is not None
        and not rules.abstain
        and rules.step_index is not None
        and (rules.confidence or 0) >= 0.6
        and rules.step_index < (failure.step or 0)
    ):
        return None  # a failure never made good came first: where the run went wrong
    return Blame(
        step_index=failure.step,
        actor=verdict.actors.get(failure.step or 0) or None,
        reason=f"check {check.name}: {quote_whole(failure.message, 160)}",
        confidence=CHECK_CONFIDENCE,
        source="rules",
    )
