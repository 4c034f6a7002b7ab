"""What a verdict leaves as: its records encoded and masked, ready to send, and the summary
metrics and the log line read. The worker, the judge stage and the tests build them here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from tracejudge.judges.agreement.tally import Kept, kept_of
from tracejudge.judges.masking.redact import masked_json
from tracejudge.judges.rules.judge import RuleVerdict
from tracejudge.judges.verdict.conclude import Verdict
from tracejudge.models.outputs import Evaluation, InterventionMade, Origin, Saving, Usage


@dataclass(frozen=True)
class Summary:
    """What metrics and the log line need of an evaluation."""

    request_id: str
    judge_status: str
    overall_score: int
    success: bool
    incomplete: bool
    closed_by: str
    alert_kinds: tuple[str, ...] = ()
    reflection: bool = False
    agent_name: str | None = None
    usage: Usage | None = None
    passed: bool = False
    # the rules' verdict of a request the judge will amend: counted apart, so that each
    # request's final verdict is counted once (streams/shared/outputs.py)
    pending: bool = False
    # an iterative workflow's loop: (an early stop was decided, rounds used, the limit)
    iterations: tuple[bool, int, int | None] | None = None
    # interventions sent while it ran: (kind, whether the run stopped after it)
    interventions: tuple[tuple[str, bool], ...] = ()
    saved: Saving | None = None  # what a stopped run did not spend (an estimate)
    # the evaluation's interventions in full, in the order sent: what each steer did
    # (judges/agreement/action_effects.py `steered`)
    interventions_made: tuple[InterventionMade, ...] = ()
    # the team's own dimensions the judge scored (name, score): a metric each
    dimensions: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Made:
    """Encoded and masked, ready to send: a verdict's records; for a request the judge will
    read, its pending rules' verdict and the judge job."""

    request_id: str
    evaluation: bytes | None = None
    reflection: bytes | None = None
    alerts: list[bytes] = field(default_factory=list)
    summary: Summary | None = None
    job: bytes | None = None
    timeline: bytes | None = None  # judges/windows/timeline.py, JSON: kept where the evaluation is
    # what a final verdict keeps for its request's outcomes to meet (None: not final)
    kept: Kept | None = None
    # a follow-up's parent request (its evaluation's origin), and, once looked up, the
    # parent's kept verdict (`chained`)
    parent: str | None = None
    origin: Kept | None = None
    # a final verdict's failure mode (or none: a clean pass), for the modes agent (models/modes.py)
    mode_run: bytes | None = None


def _low(alerts: list[Any]) -> frozenset[str]:
    """The team's dimensions this verdict alerted on (their `low_dimension` alerts)."""
    return frozenset(a.dimension for a in alerts if a.kind == "low_dimension" and a.dimension)


def encode(model: Any) -> bytes:
    """Every record the worker produces is encoded here: free text masked, ids kept."""
    return masked_json(model).encode("utf-8")


def made_of(
    verdict: Verdict,
    timeline: list[dict[str, Any]] | None = None,
    not_kept: str = "off",
    rules: RuleVerdict | None = None,
) -> Made:
    """`not_kept`: why there is no timeline when `timeline` is None (the evaluation's
    `timeline` field says it, for `tracejudge show` and the explorer). `rules`: the rules' own
    verdict of a request the LLM judge read (its job's), kept beside the judge's."""
    kept = "kept" if timeline is not None else not_kept
    evaluation = verdict.evaluation.model_copy(update={"timeline": kept})
    summary = Summary(
        evaluation.request_id,
        evaluation.judge_status,
        evaluation.overall_score,
        evaluation.success,
        evaluation.incomplete,
        evaluation.closed_by,
        tuple(alert.kind for alert in verdict.alerts),
        verdict.reflection is not None,
        evaluation.agent_name,
        evaluation.usage,
        evaluation.passed,
        not evaluation.final,
        None
        if evaluation.iterations_used is None
        else (
            bool(evaluation.early_stop_decided),
            evaluation.iterations_used,
            evaluation.max_iterations,
        ),
        tuple((m.kind, m.stopped_after) for m in evaluation.interventions),
        evaluation.saved,
        tuple(evaluation.interventions),
        tuple(sorted((evaluation.dimension_scores.criteria or {}).items())),
    )
    return Made(
        evaluation.request_id,
        encode(evaluation),
        None if verdict.reflection is None else encode(verdict.reflection),
        [encode(alert) for alert in verdict.alerts],
        summary,
        timeline=None if timeline is None else json.dumps(timeline, ensure_ascii=False).encode(),
        kept=kept_of(evaluation, rules, low=_low(verdict.alerts)) if evaluation.final else None,
        parent=None if evaluation.origin is None else evaluation.origin.request_id,
        mode_run=_mode_run(evaluation) if evaluation.final else None,
    )


def _mode_run(evaluation: Evaluation) -> bytes:
    """Ids, a time and the mode, whose words come from the masked evaluation: nothing to mask.
    A dict, not the model: one per final verdict, most of them clean (`ModeRun` reads it)."""
    run: dict[str, Any] = {"type": "mode_run", "request_id": evaluation.request_id}
    run["at"] = evaluation.ts
    if evaluation.agent_name is not None:
        run["agent_name"] = evaluation.agent_name
    if evaluation.agent_version is not None:
        run["agent_version"] = evaluation.agent_version
    if evaluation.mode is not None:
        run["mode"] = evaluation.mode.model_dump(exclude_none=True)
    return json.dumps(run, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def chained(made: Made, origin: Kept) -> Made:
    """A follow-up's records with its parent's verdict (`origin`, kept when the parent's was
    published) in the evaluation's `origin`, and the chain's first request in what it keeps.
    The evaluation is already encoded: only its `origin` changes (ids and numbers, nothing
    to mask)."""
    assert made.parent is not None and made.evaluation is not None
    found = Origin(
        request_id=made.parent,
        root_request_id=origin.root or made.parent,
        found=True,
        reflection_round=origin.round,
        overall_score=origin.score,
        success=origin.success,
        incomplete=origin.incomplete,
        verdict_ts=origin.ts,
    )
    evaluation = json.loads(made.evaluation)
    evaluation["origin"] = found.model_dump(mode="json")
    encoded = json.dumps(evaluation, ensure_ascii=False, separators=(",", ":")).encode()
    kept = None if made.kept is None else replace(made.kept, root=found.root_request_id)
    return replace(made, evaluation=encoded, kept=kept, origin=origin)
