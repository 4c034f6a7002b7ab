"""`tracejudge show REQUEST_ID`: a verdict next to what it judged, in a terminal.

The evaluation and the request's timeline come from Redis (where the worker keeps both, masked,
for TRACEJUDGE_EVALUATION_TTL_S); without Redis, the evaluation is read from the evaluations
topic (the last LOOK_BACK_S) and there is no timeline to show.
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

from redis.exceptions import RedisError

from tracejudge.models import names
from tracejudge.streams.kafka.io import read_since
from tracejudge.streams.outputs import redis_client
from tracejudge.streams.settings import Settings
from tracejudge.streams.ui.locate import Marks, locate

log = logging.getLogger(__name__)

LOOK_BACK_S = 7 * 86400.0
TEXT_WIDTH = 90


async def kept(settings: Settings, request_id: str) -> tuple[dict[str, Any] | None, list[Any]]:
    """The request's evaluation and timeline as Redis keeps them: (None, []) without Redis, or
    when it does not answer (logged; the topic still has the evaluation)."""
    redis = redis_client(settings.redis_url)
    if redis is None:
        return None, []
    try:
        raw, steps = await redis.mget(
            [
                names.REDIS_EVALUATION_KEY.format(request_id=request_id),
                names.REDIS_TIMELINE_KEY.format(request_id=request_id),
            ]
        )
        return (json.loads(raw) if raw else None), (json.loads(steps) if steps else [])
    except (OSError, RedisError, ValueError) as exc:
        log.warning("Redis unavailable for %s: %s", request_id, exc)
        return None, []
    finally:
        await redis.aclose()


async def fetch(settings: Settings, request_id: str) -> tuple[dict[str, Any] | None, list[Any]]:
    """The request's latest evaluation and its timeline ([] when none was kept)."""
    evaluation, timeline = await kept(settings, request_id)
    if evaluation is None:
        records = await read_since(settings, settings.topic(names.EVALUATIONS), LOOK_BACK_S)
        for key, value in records:  # the last one wins, as in Redis
            if key == request_id.encode():
                evaluation = json.loads(value)
    return evaluation, timeline


def _clock(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(text: Any) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= TEXT_WIDTH else flat[: TEXT_WIDTH - 1] + "…"


def render(evaluation: dict[str, Any], timeline: list[dict[str, Any]]) -> str:
    e = evaluation
    lines = [
        f"request {e['request_id']}  agent {e.get('agent_name') or '-'}  "
        f"closed by {e['closed_by']} at {_clock(e.get('ts'))}",
        f"score {e['overall_score']} ({'pass' if e['passed'] else 'fail'}; threshold "
        f"{e['warn_threshold']})  success {e['success']}  incomplete {e['incomplete']}  "
        f"judge {e['judge_status']}",
        f"summary: {e['summary']}",
    ]
    if e.get("findings"):
        lines.append("findings:")
        lines += [f"  {f['rule']}: {_short(f['evidence'])}" for f in e["findings"]]
    if e.get("reasons"):
        lines.append("reasons:")
        lines += [f"  - {_short(r)}" for r in e["reasons"]]
    if e.get("failed_steps"):
        lines.append("failed steps:")
        lines += [
            f"  #{s.get('index', '?')} {s.get('tool') or ''}: {_short(s['reason'])}"
            for s in e["failed_steps"]
        ]
    if e.get("remaining_steps"):
        lines.append("remaining: " + "; ".join(e["remaining_steps"]))
    usage = e.get("usage")
    if usage:
        cost = f", ${usage['cost_usd']:.4f}" if usage.get("cost_usd") is not None else ""
        lines.append(
            f"usage: {usage['model_calls']} model calls, {usage['input_tokens']} in / "
            f"{usage['output_tokens']} out tokens{cost}"
        )
    lines.append(_timeline(timeline, locate(e, timeline)))
    return "\n".join(lines) + "\n"


def _timeline(timeline: list[dict[str, Any]], marks: Marks) -> str:
    """The steps in order, each with the findings it concerns (as the explorer marks them)."""
    if not timeline:
        return (
            "timeline: not kept (no Redis; a passed request, with TRACEJUDGE_TIMELINES=flagged; "
            "TRACEJUDGE_TIMELINES=off; or past its TTL)"
        )
    start = next((t["ts"] for t in timeline if "ts" in t), None)
    rows = [f"timeline ({len(timeline)} events, texts clipped and masked):"]
    if marks.request_wide:
        rows.append(
            "  about the whole request: " + ", ".join(f["rule"] for f in marks.request_wide)
        )
    for i, entry in enumerate(timeline):
        offset = f"+{entry['ts'] - start:.2f}s" if start is not None and "ts" in entry else ""
        what = entry.get("tool") or entry.get("phase") or ""
        if "success" in entry:
            what += " ok" if entry["success"] else " FAILED"
        said = " → ".join(
            _short(entry[k]) for k in ("text", "result", "error") if entry.get(k) is not None
        )
        here = marks.by_entry.get(i)
        mark = f"  ← {'; '.join(here)}" if here else ""
        rows.append(
            f"  {offset} #{entry.get('step', '-')!s:<4} {entry['type']:<15} {what:<18} {said}{mark}"
        )
    return "\n".join(rows)
