"""A closed request's steps as a timeline to look at next to its verdict (`tracejudge show`, the
explorer): one entry per event, texts clipped to TEXT_LIMIT and masked, so what is kept after the
window closes is small and holds no secret or personal data.

Kept where the evaluation is kept (Redis, under `tracejudge:timeline:{request_id}`, with the
evaluation's TTL): the verdict and what it judged stay together and go together.
"""

from __future__ import annotations

from typing import Any

from tracejudge.judges.masking.clipping import clip_whole
from tracejudge.judges.masking.redact import mask
from tracejudge.models.events import usage_of
from tracejudge.models.window import Window

TEXT_LIMIT = 300  # per text of a step: enough to recognise it, not the whole of it
MAX_ENTRIES = 200


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    # clipped first, so only what is kept is masked; clip_whole, so no secret is split by the cut
    return mask(clip_whole(str(value), TEXT_LIMIT))


def timeline_of(window: Window) -> list[dict[str, Any]]:
    """Entries in step order: `step`, `type`, `ts`, and what the step says (masked)."""
    events: list[Any] = [e for e in (window.task, *window.steps, window.final) if e is not None]
    entries = []
    for event in events[:MAX_ENTRIES]:
        entry: dict[str, Any] = {"step": event.step, "type": event.type}
        if event.ts is not None:
            entry["ts"] = event.ts
        if getattr(event, "actor", None):  # multi-agent runs: who took the step
            entry["actor"] = _text(event.actor)
        kind = event.type
        if kind == "task_started":
            entry["text"] = _text(event.goal)
        elif kind == "tool_call":
            entry.update(
                tool=event.tool,
                success=event.success,
                text=_text(event.args_summary),
                result=_text(event.result_preview),
                error=_text(event.error),
            )
        elif kind == "reasoning_step":
            entry.update(phase=event.phase, text=_text(event.intent_summary or event.action))
            entry["error"] = _text(event.error)
        elif kind == "user_message":
            entry["text"] = _text(event.text)
        elif kind == "iteration":
            entry.update(iteration=event.iteration, text=_text(event.response))
            entry["success"] = event.exec_success
        elif kind == "final_response":
            entry["text"] = _text(event.output)
        usage = usage_of(event)
        if usage is not None:  # a model, or the dict a window read back from its records holds
            given = usage if isinstance(usage, dict) else usage.model_dump()
            entry["usage"] = {k: v for k, v in given.items() if v is not None}
        entries.append({k: v for k, v in entry.items() if v is not None})
    if len(events) > MAX_ENTRIES:
        entries.append({"type": "omitted", "text": f"{len(events) - MAX_ENTRIES} more events"})
    return entries
