"""What the LLM judge reads of a session at a turn: the latest turn as a request, its goal
preceded by the summary of the conversation before it (the judge's own summary of the turns it
read: a rolling summary, bounded), fenced and fitted by the request judge's input builder, so
the same masking, neutralising and limits in characters and tokens hold."""

from __future__ import annotations

from tracejudge.judges.llm.prompt import JudgeInput, build_input
from tracejudge.judges.masking.clipping import clip_whole
from tracejudge.judges.sessions.assemble import assembled
from tracejudge.models.sessions import SessionTurn

SUMMARY_CHARS = 1_500  # the rolling summary kept between turns, and shown to the judge


def rolling(summary: str) -> str:
    """A judge's summary as kept for the next turn: bounded."""
    return clip_whole(summary.strip(), SUMMARY_CHARS)


def session_input(
    session_key: str,
    turn: SessionTurn,
    number: int,
    summary: str | None,
    max_chars: int | None,
    max_tokens: int | None = None,
) -> JudgeInput:
    """The judge's input for turn `number` (1-based) of a session."""
    window, _ = assembled(session_key, [turn.events])
    asked = next(
        (str(e.get("goal") or "") for e in turn.events if e.get("type") == "task_started"), ""
    )
    before = (
        f"What happened before, as summarised: {rolling(summary)}"
        if summary
        else "No earlier turn was summarised."
    )
    goal = (
        f"[A conversation between a user and the agent, judged as a whole at its turn {number}: "
        f"has the user got what they came for so far? Answer `summary` with a summary of the "
        f"whole conversation so far.] {before} The user's latest request: {asked}"
    )
    task = window.task.model_copy(update={"goal": goal}) if window.task is not None else None
    return build_input(window.model_copy(update={"task": task}), max_chars, max_tokens=max_tokens)
