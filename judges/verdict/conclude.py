"""From a closed window to the events tracejudge emits: evaluation, reflection, alerts.

The rule verdict is always computed; a judge outcome (the LLM's answer, or why there is none)
decides the verdicts when it is valid and is blended into the score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from tracejudge.judges.agreement.calibration import Calibration, CalibrationBook
from tracejudge.judges.inflight.early_stop import DEFAULT_MAX_ITERATIONS
from tracejudge.judges.llm.answer import JudgeAnswer
from tracejudge.judges.llm.criteria import CriteriaBook
from tracejudge.judges.masking.redact import mask
from tracejudge.judges.modes.signature import mode_of, tools_before
from tracejudge.judges.rules.agent_norms import RunStats
from tracejudge.judges.rules.judge import STOPPED_CAP, RuleVerdict
from tracejudge.judges.rules.remaining import MAX_LEFT
from tracejudge.judges.rules.stops import after_crossing
from tracejudge.models.events import ToolCall
from tracejudge.models.ids import intervention_id, stable_id
from tracejudge.models.outputs import (
    Alert,
    Blame,
    DimensionScores,
    Evaluation,
    FailedStep,
    Finding,
    InterventionMade,
    JudgeCall,
    JudgeErrorCode,
    JudgeStatus,
    Origin,
    ReflectionRequest,
    RemainingStep,
    Saving,
    Usage,
)
from tracejudge.models.version import PACKAGE_VERSION
from tracejudge.models.window import ClosedBy, Window

__all__ = [
    "JudgeJob",
    "JudgeOutcome",
    "Policy",
    "Verdict",
    "WindowFacts",
    "conclude",
    "evaluator_version",
    "stable_id",
]


@dataclass(frozen=True)
class Policy:
    warn_threshold: int = 60
    reflection_enabled: bool = True
    max_reflection_rounds: int = 2
    rule_weight: float = 0.6
    # the length of an iterative loop whose events carry no max_iterations (the design's 5)
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    # per-agent thresholds learned from outcomes, in place of warn_threshold. The
    # policy is built once from settings and shared; the book is the one part learned while
    # the process runs, so it is held by reference and refreshed in place (its `replace`), and
    # left out of equality. None: calibration off.
    calibrations: CalibrationBook | None = field(default=None, compare=False)
    # the teams' criteria: the thresholds of their own dimensions (a `low_dimension` alert)
    criteria: CriteriaBook | None = field(default=None, compare=False)

    def dimension_thresholds(self, agent_name: str | None) -> dict[str, int]:
        found = None if self.criteria is None else self.criteria.for_agent(agent_name)
        return {} if found is None else dict(found.thresholds)

    def threshold_for(self, agent_name: str | None) -> tuple[int, Calibration | None]:
        """The alert threshold of an agent's verdicts now, and the calibration behind it."""
        found = self.calibrations.get(agent_name) if self.calibrations is not None else None
        return (self.warn_threshold, None) if found is None else (found.threshold, found)


@dataclass(frozen=True)
class JudgeOutcome:
    status: JudgeStatus
    error: JudgeErrorCode | None = None
    answer: JudgeAnswer | None = None
    cached: bool = False  # the answer came from the cache, not the model
    latency_s: float | None = None  # the model call's, when one was made
    call: JudgeCall | None = None  # provenance, when the judge handled the request
    note: str | None = None  # why the judge did not read it, for the reasons (skipped)
    budget_spent: Literal["minute", "day"] | None = None  # the cap that stopped the call
    expired: bool = False  # waited in the judge queue past its bound (llm_job_max_age_s)
    pending: bool = False  # not judged yet: the rules' verdict until the judge's (PENDING)


DISABLED = JudgeOutcome("disabled")
SKIPPED = JudgeOutcome("skipped")
# The rules' verdict of a request on its way to the judge, published at close: a
# request has an evaluation within milliseconds whatever the judge's queue, and the judge's
# verdict replaces it under the same evaluation_id
# (`skipped`, not a new status: a consumer validating judge_status against an older schema
# keeps reading; `Evaluation.final` tells it apart)
PENDING = JudgeOutcome(
    "skipped",
    note="judge pending: the LLM judge's verdict will replace this one (same evaluation_id)",
    pending=True,
)


class WindowFacts(BaseModel):
    """What an evaluation needs to know about its window besides the verdicts."""

    request_id: str
    session_key: str | None = None
    agent_name: str | None = None
    agent_version: str | None = None
    task_id: str | None = None
    goal: str = ""
    reflection_round: int = 0
    # a follow-up's parent (task_started): its verdict is looked up when published
    parent_request_id: str | None = None
    closed_by: ClosedBy
    step_count: int = 0
    steps_dropped: int = 0
    events_over_cap: int = 0
    iterations_used: int | None = None
    max_iterations: int | None = None
    stopped_early: bool | None = None
    early_stop_decided: bool | None = None
    usage: Usage | None = None
    trace_id: str | None = None
    span_id: str | None = None
    interventions: list[InterventionMade] = Field(default_factory=list)
    saved: Saving | None = None  # set with the agent's norms (judges/verdict/make.py)
    # each tool's preceding call, for a failure mode's "after" (judges/modes/signature.py):
    # set by `make_verdict` where a call failed (`called_before`)
    tools_before: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(
        cls,
        window: Window,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        stats: RunStats | None = None,
    ) -> WindowFacts:
        """`max_iterations`: the loop's length when its events carry none. `stats`: the run's
        exact counts (the worker's, beyond the step limit too); counted from the window when
        not given."""
        rounds = window.iterations
        used = max((r.iteration for r in rounds), default=None)
        given = max((r.max_iterations or 0 for r in rounds), default=0) or None
        limit = None if used is None else given or max_iterations
        decided = any(action in ("stop", "finalize") for action, _ in window.early_stops)
        stopped = None if used is None else decided and (limit is None or used < limit)
        return cls(
            iterations_used=used,
            max_iterations=limit,
            stopped_early=stopped,
            early_stop_decided=None if used is None else decided,
            request_id=window.request_id,
            session_key=window.first("session_key"),
            agent_name=window.first("agent_name"),
            agent_version=window.first("agent_version"),
            task_id=window.first("task_id"),
            goal=window.task.goal if window.task else "",
            reflection_round=window.task.reflection_round if window.task else 0,
            parent_request_id=window.task.parent_request_id if window.task else None,
            closed_by=window.closed_by,
            step_count=window.step_count,
            steps_dropped=window.steps_dropped,
            events_over_cap=window.events_over_cap,
            usage=(stats or RunStats.of(window)).usage,
            trace_id=window.task.trace_id if window.task else None,
            span_id=window.task.span_id if window.task else None,
            interventions=interventions_made(window),
        )


class JudgeJob(BaseModel):
    """A closed request waiting for the LLM judge (the internal judge-requests topic)."""

    facts: WindowFacts
    rules: RuleVerdict
    content: str
    closed_at: float
    terminal_at: float | None = None  # the terminal event's broker timestamp: verdict latency
    timeline: list[dict[str, Any]] | None = None  # masked (judges/windows/timeline.py), when kept
    timeline_not_kept: Literal["off", "no_redis"] = "off"  # else why not (Evaluation.timeline)
    steps_omitted: int = 0  # steps the judge's input left out (JudgeInput.steps_omitted)
    left_out: dict[str, int] = Field(default_factory=dict)  # all it left out (JudgeInput.cuts)
    # its rules' verdict was published at close as pending (older workers did not): the
    # judge's verdict amends it, and the time to a first verdict was measured then
    pending_published: bool = False


@dataclass(frozen=True)
class Verdict:
    evaluation: Evaluation
    reflection: ReflectionRequest | None = None
    alerts: list[Alert] = field(default_factory=list)


def interventions_made(window: Window) -> list[InterventionMade]:
    """What the run did after each intervention (judges/rules/stops.py: steps after it, and
    whether the run stopped after it)."""
    made = []
    told: dict[tuple[str, str, str], int] = {}  # a loop's steers are counted per rule
    read = _steers_read(window)
    for kind, crossed, action, at in window.interventions:
        nth = told[kind, crossed, action] = told.get((kind, crossed, action), 0) + 1
        iid = intervention_id(window.request_id, kind, action, crossed, nth)
        after, stopped = after_crossing(window, at, iid)
        made.append(
            InterventionMade.model_validate(
                {
                    "intervention_id": iid,
                    "kind": kind,
                    "crossed": crossed,
                    "action": action,
                    "at_step": at,
                    "steps_after": after,
                    "stopped_after": stopped,
                    "read": None if read is None or action != "steer" else iid in read,
                }
            )
        )
    return made


def _steers_read(window: Window) -> set[str] | None:
    """The steers the agent's client says it handed to the model (the final response's
    `control.read`); None when it says nothing (no final, an older client, no reader)."""
    final = window.final
    control = None if final is None else final.control
    if isinstance(control, dict):  # a window read back from its records: not validated again
        ids = control.get("read")
        return {str(i) for i in ids[:32]} if isinstance(ids, list) else None
    return None if control is None else set(control.read)


def called_before(window: Window) -> dict[str, str]:
    """Each tool's preceding call in the window (`tools_before`)."""
    return tools_before(e.tool for e in window.steps if isinstance(e, ToolCall))


def evaluator_version(rules_version: str, judge_version: str | None = None) -> str:
    """Names the rules and, when the judge is on, its prompt and model; never its outcome, so a
    re-judged request (after a crash, or a fallback) keeps its evaluation_id."""
    version = f"tracejudge-{PACKAGE_VERSION}/{rules_version}"
    return f"{version}+{judge_version}" if judge_version else version


def _blame(rules: RuleVerdict, answer: JudgeAnswer | None) -> Blame | None:
    """The judge's blame when it names a step of this run, else the rules' (masked)."""
    named = answer.blame if answer is not None else None
    if named is not None and named.step_index is not None and named.step_index in rules.actors:
        return Blame(
            step_index=named.step_index,
            # the run's own record of who took the step, never the judge's free text
            actor=mask(rules.actors.get(named.step_index) or "") or None,
            reason=mask(named.reason) or "named by the LLM judge",
            confidence=named.confidence,
            source="judge",
        )
    if rules.blame is None:
        return None
    return rules.blame.model_copy(
        update={
            "reason": mask(rules.blame.reason),
            "actor": None if rules.blame.actor is None else mask(rules.blame.actor),
        }
    )


def _remaining(rules: RuleVerdict, answer: JudgeAnswer | None) -> list[RemainingStep]:
    """The work left as the trace names it (masked); the judge's words only when the trace
    named nothing and the judge's verdict is the one taken."""
    named = rules.remaining
    if not named and answer is not None:
        named = [
            RemainingStep(kind="judge", step=text, why="the LLM judge's reading of the run")
            for text in answer.remaining_steps[:MAX_LEFT]
        ]
    return [
        r.model_copy(
            update={
                "step": mask(r.step),
                "why": mask(r.why),
                "args": None if r.args is None else mask(r.args),
                "error": None if r.error is None else mask(r.error),
            }
        )
        for r in named
    ]


def _failed(verdict: RuleVerdict | JudgeAnswer, rules: RuleVerdict) -> list[FailedStep]:
    """The verdict's failed steps, and the rules' failures never made good that it left out:
    they are what keeps `success` false, so the evaluation names them."""
    if verdict is rules:
        return list(rules.failed_steps)
    named = {f.index for f in verdict.failed_steps}
    return [*verdict.failed_steps, *(f for f in rules.failed_steps if f.index not in named)]


def _named(step: FailedStep) -> str:
    where = "the final response" if step.index is None else f"step {step.index}"
    return where if step.tool is None else f"{where}, {step.tool}"


def _masked_steps(steps: list[FailedStep]) -> list[FailedStep]:
    return [s.model_copy(update={"reason": mask(s.reason)}) for s in steps]


def conclude(
    facts: WindowFacts,
    rules: RuleVerdict,
    outcome: JudgeOutcome,
    policy: Policy,
    version: str,
    now: float,
) -> Verdict:
    """Blend, settle `success` and `incomplete`, and plan all that one closed request emits."""
    evaluation_id = stable_id("evaluation", version, facts.request_id)
    answer = outcome.answer if outcome.status == "ok" else None
    rule_exact = rules.rule_score if rules.rule_exact is None else rules.rule_exact
    dimensions = DimensionScores(
        completeness=rules.completeness,
        execution_health=rules.execution_health,
        efficiency=rules.efficiency,
    )
    if answer is not None:
        llm_score: int | None = answer.llm_score
        if llm_score is None:  # a verdict without scores (the seed's shape): rules score it
            exact = rule_exact
            unscored = ["the judge gave no scores: overall_score is the rule score"]
        else:
            # blended from the published scores, so anyone can check the formula on them
            exact = policy.rule_weight * rules.rule_score + (1 - policy.rule_weight) * llm_score
            unscored = []
        dimensions = dimensions.model_copy(
            update={
                "correctness": answer.correctness,
                "relevance": answer.relevance,
                "actionability": answer.actionability,
                "criteria": answer.criteria_scores,
            }
        )
        if answer.has_verdict:
            verdict: RuleVerdict | JudgeAnswer = answer
            unverdicted = []
        else:  # scores only (the online-evaluation design's shape): the rules decide
            verdict = rules
            unverdicted = [
                "the judge gave scores but no verdict: success and incomplete are the rules'"
            ]
        reasons = answer.reasons + unscored + unverdicted + [f"rules: {r}" for r in rules.reasons]
        suggestions = answer.suggestions or rules.suggestions
    else:
        llm_score = None
        exact = rule_exact  # a fallback never invents a score
        verdict = rules
        reasons = list(rules.reasons)
        suggestions = list(rules.suggestions)
    if outcome.note is not None:
        reasons.append(outcome.note)
    remaining = _remaining(rules, answer if verdict is answer else None)
    success = rules.success if verdict.success is None else verdict.success
    incomplete = rules.incomplete if verdict.incomplete is None else verdict.incomplete
    threshold, calibration = policy.threshold_for(facts.agent_name)
    if calibration is not None:
        reasons.append(calibration.words())
    if rules.stopped is not None:
        # a stop ended the run before its answer: a fact of the trace, not a reading of it, so
        # the judge's verdict does not take it back; below the threshold in use, like the rules
        incomplete = True
        exact = min(exact, STOPPED_CAP, max(0, threshold - 1))
    if rules.crashed is not None:
        # the run ended by an error: failed and short of its goal whatever the judge read
        success, incomplete = False, True
        exact = min(exact, STOPPED_CAP, max(0, threshold - 1))
    if rules.failed_steps and success:
        # a step failed and was never made good: the design's `success` is false by definition,
        # a fact of the trace the judge's reading does not take back (it still moves the score
        # and `incomplete`)
        success = False
        reasons.append(
            "a step failed and was never made good ("
            + "; ".join(_named(f) for f in rules.failed_steps[:3])
            + "): success is false whatever the judge read"
        )
    if rules.gave_up is not None:
        # the run went round and its own answer says it could not do the job: not reached
        incomplete = True
        exact = min(exact, STOPPED_CAP, max(0, threshold - 1))
    if rules.failed_checks:  # the team's own rule failed it: below the threshold in use
        exact = min(exact, STOPPED_CAP, max(0, threshold - 1))
    overall = round(exact)
    clean = exact >= threshold and success and not incomplete
    evaluation = Evaluation(
        evaluation_id=evaluation_id,
        evaluator_version=version,
        request_id=facts.request_id,
        session_key=facts.session_key,
        agent_name=facts.agent_name,
        agent_version=facts.agent_version,
        task_id=facts.task_id,
        overall_score=overall,
        # cut, not rounded, to a tenth: 59.96 is 59.9, never a "60" that did not pass 60
        overall_exact=math.floor(exact * 10) / 10,
        rule_score=rules.rule_score,
        llm_score=llm_score,
        dimension_scores=dimensions,
        # the design tests the threshold on the score before rounding: 59.8 does not pass 60
        passed=exact >= threshold,
        warn_threshold=threshold,
        success=success,
        incomplete=incomplete,
        failed_steps=_masked_steps(_failed(verdict, rules)),
        remaining_steps=[r.words() for r in remaining],
        remaining=remaining,
        blame=_blame(rules, answer) if not clean else None,
        summary=mask(verdict.summary or rules.summary),
        reasons=[mask(r) for r in reasons],
        suggestions=[mask(s) for s in suggestions],
        findings=[
            Finding(rule=rule, evidence=mask(text), version=rules.check_versions.get(rule))
            for rule, text in rules.findings
        ]
        + [
            Finding(rule=rule, evidence=mask(text), version=rules.check_versions.get(rule), step=at)
            for rule, text, at in rules.check_findings
        ],
        judge_status=outcome.status,
        judge_error=outcome.error,
        closed_by=facts.closed_by,
        step_count=facts.step_count,
        steps_dropped=facts.steps_dropped,
        events_over_cap=facts.events_over_cap,
        reflection_round=facts.reflection_round,
        # the parent's verdict is not known here (pure): the publisher fills it in from Redis
        origin=None if facts.parent_request_id is None else unresolved(facts.parent_request_id),
        iterations_used=facts.iterations_used,
        max_iterations=facts.max_iterations,
        stopped_early=facts.stopped_early,
        early_stop_decided=facts.early_stop_decided,
        interventions=facts.interventions,
        saved=facts.saved,
        usage=facts.usage,
        trace_id=facts.trace_id,
        span_id=facts.span_id,
        judge=outcome.call,
        calibration=None if calibration is None else calibration.used(),
        final=not outcome.pending,
        ts=now,
    )
    # what it failed of, from what the verdict says (judges/modes): None for a clean pass
    evaluation.mode = mode_of(evaluation, facts.tools_before)
    if outcome.pending:
        # reflection requests and alerts carry deterministic ids and cannot be taken back:
        # they follow the final verdict, which the judge may turn the other way
        return Verdict(evaluation=evaluation)
    return _plan(evaluation, facts, policy, now, exact, rules.stopped)


def _low_dimensions(evaluation: Evaluation, policy: Policy, now: float) -> list[Alert]:
    """A `low_dimension` alert for each of the team's dimensions the judge scored below the
    threshold the criteria file gives it: one per dimension and evaluation, whether the
    verdict passed or not (a run can pass overall and break the team's policy)."""
    thresholds = policy.dimension_thresholds(evaluation.agent_name)
    scored = evaluation.dimension_scores.criteria or {}
    return [
        Alert.of(
            "low_dimension",
            f"{evaluation.evaluation_id}:{name}",
            "warning",
            f"{name} {scored[name]} below its threshold {floor} (the team's dimension): "
            f"{evaluation.summary}",
            now,
            request_id=evaluation.request_id,
            evaluation_id=evaluation.evaluation_id,
            dimension=name,
        )
        for name, floor in sorted(thresholds.items())
        if name in scored and scored[name] < floor
    ]


def unresolved(parent_request_id: str) -> Origin:
    """A follow-up's origin before its parent's verdict is looked up (or where it cannot be)."""
    return Origin(request_id=parent_request_id, root_request_id=parent_request_id, found=False)


def _plan(
    evaluation: Evaluation,
    facts: WindowFacts,
    policy: Policy,
    now: float,
    exact: float,
    stopped: str | None = None,
) -> Verdict:
    """`stopped`: the stop that ended the run before its answer, in words (RuleVerdict)."""
    evaluation_id = evaluation.evaluation_id
    threshold = evaluation.warn_threshold  # the agent's calibrated one, when it has one
    alerts: list[Alert] = []
    if not evaluation.passed:
        # the score the threshold was tested on: "59.8 below 60", never "60 below 60"
        shown = f"{exact:.1f}".removesuffix(".0")
        # a stop that ended the run is named whoever wrote the summary (the judge's may not)
        said = evaluation.summary
        if stopped is not None and stopped not in said:
            said = f"{stopped}; {said}"
        alerts.append(
            Alert.of(
                "low_score",
                evaluation_id,
                "critical" if exact < threshold / 2 else "warning",
                f"score {shown} below threshold {threshold}: {said}",
                now,
                request_id=facts.request_id,
                evaluation_id=evaluation_id,
            )
        )
    alerts += _low_dimensions(evaluation, policy, now)
    reflection = None
    round_ = facts.reflection_round
    # a run its budget stopped is not asked to go on: the follow-up would spend past the limit
    # the team set for the request (a loop's stop may be: its follow-up starts afresh)
    budget = next(
        (m for m in evaluation.interventions if m.kind == "budget" and m.stopped_after), None
    )
    # nor a run a team's check stopped: the call the check flagged went through before the
    # stop, and a follow-up told to finish the request could make it again
    checked = next(
        (
            m
            for m in evaluation.interventions
            if m.kind == "check" and m.action == "stop" and m.stopped_after
        ),
        None,
    )
    if policy.reflection_enabled and evaluation.incomplete and budget is not None:
        evaluation = evaluation.model_copy(
            update={
                "reasons": [
                    *evaluation.reasons,
                    f"stopped by its {budget.crossed} budget: no reflection asked",
                ]
            }
        )
    elif policy.reflection_enabled and evaluation.incomplete and checked is not None:
        evaluation = evaluation.model_copy(
            update={
                "reasons": [
                    *evaluation.reasons,
                    f"stopped by the team's check {checked.crossed} after the call it flagged "
                    "went through: no reflection asked",
                ]
            }
        )
    elif policy.reflection_enabled and evaluation.incomplete:
        if round_ >= policy.max_reflection_rounds:
            alerts.append(
                Alert.of(
                    "reflection_exhausted",
                    evaluation_id,
                    "warning",
                    f"still incomplete after {round_} reflection round(s) "
                    f"(limit {policy.max_reflection_rounds}); no further reflection",
                    now,
                    request_id=facts.request_id,
                    evaluation_id=evaluation_id,
                )
            )
        else:
            reflection = ReflectionRequest(
                reflection_id=stable_id("reflection", evaluation_id),
                evaluation_id=evaluation_id,
                request_id=facts.request_id,
                session_key=evaluation.session_key,
                agent_name=evaluation.agent_name,
                task_id=evaluation.task_id,
                goal=mask(facts.goal),
                summary=evaluation.summary,
                failed_steps=evaluation.failed_steps,
                remaining_steps=evaluation.remaining_steps,
                remaining=evaluation.remaining,
                blame=evaluation.blame,
                suggestions=evaluation.suggestions,
                reflection_round=round_ + 1,
                ts=now,
            )
    # the chain ends here unless a reflection request goes out with this verdict
    evaluation = evaluation.model_copy(update={"chain_final": reflection is None})
    return Verdict(evaluation=evaluation, reflection=reflection, alerts=alerts)
