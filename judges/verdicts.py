"""From a closed window to the events tracejudge emits: evaluation, reflection, alerts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import metadata

from judges.rules import RuleJudge, RuleVerdict
from models.outputs import Alert, DimensionScores, Evaluation, ReflectionRequest
from models.window import Window


def _package_version() -> str:
    try:
        return metadata.version("tracejudge")
    except metadata.PackageNotFoundError:  # running from a source tree without install
        return "0+unknown"


PACKAGE_VERSION = _package_version()


@dataclass(frozen=True)
class Policy:
    warn_threshold: int = 60
    enable_reflection: bool = True
    max_reflection_rounds: int = 2


@dataclass(frozen=True)
class Decision:
    evaluation: Evaluation
    reflection: ReflectionRequest | None = None
    alerts: list[Alert] = field(default_factory=list)


def stable_id(*parts: str) -> str:
    """A deterministic id: the same inputs always give the same 32 hex characters."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def evaluator_version(rules: RuleJudge) -> str:
    return f"tracejudge-{PACKAGE_VERSION}/{rules.version}"


def decide(window: Window, rules: RuleJudge, policy: Policy, now: float) -> Decision:
    """Judge a closed window and plan everything that must be emitted for it."""
    verdict: RuleVerdict = rules.judge(window)
    version = evaluator_version(rules)
    evaluation_id = stable_id("evaluation", version, window.request_id)
    round_ = window.task.reflection_round if window.task else 0
    overall = verdict.rule_score
    evaluation = Evaluation(
        evaluation_id=evaluation_id,
        evaluator_version=version,
        request_id=window.request_id,
        session_key=window.first("session_key"),
        agent_name=window.first("agent_name"),
        task_id=window.first("task_id"),
        overall_score=overall,
        rule_score=verdict.rule_score,
        llm_score=None,
        dimension_scores=DimensionScores(
            completeness=verdict.completeness,
            execution_health=verdict.execution_health,
            efficiency=verdict.efficiency,
        ),
        passed=overall >= policy.warn_threshold,
        warn_threshold=policy.warn_threshold,
        success=verdict.success,
        incomplete=verdict.incomplete,
        failed_steps=verdict.failed_steps,
        remaining_steps=verdict.remaining_steps,
        summary=verdict.summary,
        reasons=verdict.reasons,
        suggestions=verdict.suggestions,
        judge_status="disabled",
        closed_by=window.closed_by,
        step_count=window.step_count,
        steps_dropped=window.steps_dropped,
        reflection_round=round_,
        ts=now,
    )
    alerts: list[Alert] = []
    if not evaluation.passed:
        alerts.append(
            Alert(
                alert_id=stable_id("alert", "low_score", evaluation_id),
                kind="low_score",
                severity="critical" if overall < policy.warn_threshold / 2 else "warning",
                request_id=window.request_id,
                evaluation_id=evaluation_id,
                message=(
                    f"score {overall} below threshold {policy.warn_threshold}: {evaluation.summary}"
                ),
                ts=now,
            )
        )
    reflection = None
    if policy.enable_reflection and evaluation.incomplete:
        if round_ >= policy.max_reflection_rounds:
            alerts.append(
                Alert(
                    alert_id=stable_id("alert", "reflection_exhausted", evaluation_id),
                    kind="reflection_exhausted",
                    severity="warning",
                    request_id=window.request_id,
                    evaluation_id=evaluation_id,
                    message=(
                        f"still incomplete after {round_} reflection round(s) "
                        f"(limit {policy.max_reflection_rounds}); no further reflection"
                    ),
                    ts=now,
                )
            )
        else:
            reflection = ReflectionRequest(
                reflection_id=stable_id("reflection", evaluation_id),
                evaluation_id=evaluation_id,
                request_id=window.request_id,
                session_key=evaluation.session_key,
                agent_name=evaluation.agent_name,
                task_id=evaluation.task_id,
                goal=window.task.goal if window.task else "",
                summary=evaluation.summary,
                failed_steps=evaluation.failed_steps,
                remaining_steps=evaluation.remaining_steps,
                reflection_round=round_ + 1,
                ts=now,
            )
    return Decision(evaluation=evaluation, reflection=reflection, alerts=alerts)
