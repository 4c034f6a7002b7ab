"""One readable line per output event, for `tracejudge tail`."""

from __future__ import annotations

import json
import time
from typing import Any

from tracejudge.models import names


def _when(ts: Any) -> str:
    if not isinstance(ts, int | float):
        return "--:--:--"
    return time.strftime("%H:%M:%S", time.localtime(ts))


def _short(text: Any, limit: int = 90) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def render(
    kind: str, value: bytes | None, headers: dict[str, bytes], key: bytes | None = None
) -> str:
    if kind == names.DLQ:
        h = {k: v.decode("utf-8", "replace") for k, v in headers.items()}
        where = (
            f"{h.get(names.DLQ_ORIGINAL_TOPIC)}[{h.get(names.DLQ_ORIGINAL_PARTITION)}]"
            f"@{h.get(names.DLQ_ORIGINAL_OFFSET)}"
        )
        return (
            f"{h.get(names.DLQ_ERROR_CLASS, '?')}: {_short(h.get(names.DLQ_ERROR), 120)} "
            f"(from {where}) key={_short(repr(key), 60)} value={_short(repr(value), 60)}"
        )
    try:
        event = json.loads(value or b"")
    except (ValueError, RecursionError):
        return f"(undecodable) {_short(repr(value))}"
    if not isinstance(event, dict):
        return _short(repr(event))
    when = _when(event.get("ts"))
    rid = event.get("request_id") or event.get("session_id")
    if kind == names.EVALUATIONS:
        return (
            f"{when} {rid} score={event.get('overall_score')} "
            f"{'PASS' if event.get('passed') else 'FAIL'} success={event.get('success')} "
            f"incomplete={event.get('incomplete')} closed_by={event.get('closed_by')} "
            f"judge={'pending' if event.get('final') is False else event.get('judge_status')}"
            f" | {_short(event.get('summary'))}"
        )
    if kind == names.ALERTS:
        return (
            f"{when} [{event.get('severity')}] {event.get('kind')} {rid}: "
            f"{_short(event.get('message'), 120)}"
        )
    if kind == names.REFLECTIONS:
        return (
            f"{when} {rid} round={event.get('reflection_round')} "
            f"failed={len(event.get('failed_steps') or [])} "
            f"remaining={_short('; '.join(event.get('remaining_steps') or []), 60)} "
            f"| goal: {_short(event.get('goal'), 60)}"
        )
    if kind == names.RETRIES:
        pattern = event.get("detected_pattern")
        follow = event.get("continue_prompt")
        return (
            f"{when} {event.get('session_id')} {event.get('type')} "
            f"attempt={event.get('attempt')} {event.get('response_type')}"
            + (f" pattern='{pattern}'" if pattern else "")
            + (f" send={follow!r}" if follow else "")
            + f" | {_short('; '.join(event.get('reasons') or []), 100)}"
        )
    if kind == names.SESSIONS:
        state = "final" if event.get("final") else "open"
        return (
            f"{when} session {event.get('session_key')} ({event.get('agent_name')}) "
            f"rev {event.get('revision')} {event.get('cause')} {state} "
            f"turns={len(event.get('turns') or [])} score={event.get('overall_exact')} "
            f"{'PASS' if event.get('passed') else 'FAIL'} success={event.get('success')} "
            f"incomplete={event.get('incomplete')} | {_short(event.get('summary'))}"
        )
    if kind == names.MODES:
        examples = " ".join((event.get("examples") or [])[:3])
        return (
            f"{when} mode {str(event.get('kind')).upper()} {event.get('agent_name')} "
            f"runs={event.get('runs')} before={event.get('before')} | "
            f"{_short((event.get('mode') or {}).get('name'), 120)} | e.g. {_short(examples, 90)}"
        )
    if kind == names.CONTROL:
        return (
            f"{when} {rid} iteration={event.get('iteration')} {event.get('action')} "
            f"({event.get('reason')}) | {_short(event.get('evidence'), 100)}"
        )
    return _short(json.dumps(event, ensure_ascii=False), 200)
