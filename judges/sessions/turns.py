"""A closed request as a turn of its session: its verdict and its events, each text masked and
clipped as a timeline's is (judges/windows/timeline.py), so what the session agent keeps and
sends holds no secret and stays small whatever the request held."""

from __future__ import annotations

from typing import Any

from tracejudge.judges.masking.clipping import clip_whole
from tracejudge.judges.masking.redact import mask
from tracejudge.models.outputs import Evaluation
from tracejudge.models.sessions import SessionTurn
from tracejudge.models.window import Window

TEXT_LIMIT = 400  # per text of an event: what the session's rules read of it
# the texts of each kind of event; every other field is an id, a flag, a number or a name
TEXTS = (
    "goal",
    "text",
    "intent_summary",
    "action",
    "observation_summary",
    "args_summary",
    "result_preview",
    "error",
    "response",
    "observation",
    "output",
)
LEFT_OUT = ("clipped", "planned_steps", "control", "validation", "usage", "event_id", "run_nonce")
# steps a turn keeps: its first and last ones, and failed calls between them; a run of 12,000
# steps is a turn of at most 80 (its record well under the broker's 1 MiB)
HEAD_STEPS, TAIL_STEPS, FAILED_STEPS = 10, 50, 20


def _text(value: str) -> str:
    return mask(clip_whole(value, TEXT_LIMIT))


def kept_steps(window: Window) -> tuple[list[Any], int]:
    """The steps a turn keeps, in order, and how many it leaves out."""
    steps = window.steps
    if len(steps) <= HEAD_STEPS + TAIL_STEPS + FAILED_STEPS:
        return list(steps), 0
    middle = steps[HEAD_STEPS:-TAIL_STEPS]
    failed = [s for s in middle if getattr(s, "success", True) is False][:FAILED_STEPS]
    kept = [*steps[:HEAD_STEPS], *failed, *steps[-TAIL_STEPS:]]
    return kept, len(steps) - len(kept)


def condensed(window: Window) -> tuple[list[dict[str, Any]], int]:
    """The window's task, kept steps and answer as contract events, texts masked and clipped;
    and how many steps were left out."""
    out = []
    steps, left_out = kept_steps(window)
    for event in (window.task, *steps, window.final):
        if event is None:
            continue
        fields = event.model_dump(exclude_none=True, exclude=set(LEFT_OUT))
        for name in TEXTS:
            if isinstance(fields.get(name), str):
                fields[name] = _text(fields[name])
        out.append(fields)
    return out, left_out


def turn_of(window: Window, evaluation: Evaluation, opened_at: float, now: float) -> SessionTurn:
    """The request as its session keeps it; `evaluation.session_key` must be set."""
    assert evaluation.session_key is not None
    events, left_out = condensed(window)
    return SessionTurn(
        session_key=evaluation.session_key,
        agent_name=evaluation.agent_name,
        agent_version=evaluation.agent_version,
        request_id=evaluation.request_id,
        evaluation_id=evaluation.evaluation_id,
        opened_at=opened_at,
        closed_at=now,
        overall_score=evaluation.overall_score,
        overall_exact=evaluation.overall_exact,
        passed=evaluation.passed,
        success=evaluation.success,
        incomplete=evaluation.incomplete,
        findings=sorted({f.rule for f in evaluation.findings}),
        events=events,
        steps_left_out=left_out,
    )
