"""`tracejudge show REQUEST_ID`: a verdict next to what it judged, in a terminal.

The evaluation and the request's timeline come from Redis (where the worker keeps both, masked,
for TRACEJUDGE_EVALUATION_TTL_S); without Redis, the evaluation is read from the evaluations
topic (the last LOOK_BACK_S) and there is no timeline to show.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.exceptions import RedisError

from tracejudge.judges.masking.redact import mask
from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.streams.explorer.locate import Marks, locate
from tracejudge.streams.kafka.io import read_since
from tracejudge.streams.shared.outputs import redis_client

log = logging.getLogger(__name__)

LOOK_BACK_S = 7 * 86400.0
TEXT_WIDTH = 90


@dataclass(frozen=True)
class Kept:
    """What Redis holds for a request, and whether Redis could be asked at all: the facts that
    say why a timeline is missing."""

    evaluation: dict[str, Any] | None = None
    timeline: list[Any] = field(default_factory=list)
    redis: Literal["off", "down", "up"] = "off"  # no URL; no answer; answered


async def look_up(settings: Settings, request_id: str) -> Kept:
    """The request's evaluation and timeline as Redis keeps them: none without Redis, or when
    it does not answer (logged; the topic still has the evaluation)."""
    redis = redis_client(settings.redis_url)
    if redis is None:
        return Kept()
    try:
        raw, steps = await redis.mget(
            [
                names.REDIS_EVALUATION_KEY.format(request_id=request_id),
                names.REDIS_TIMELINE_KEY.format(request_id=request_id),
            ]
        )
        return Kept(json.loads(raw) if raw else None, json.loads(steps) if steps else [], "up")
    except (OSError, RedisError, ValueError) as exc:
        log.warning("Redis unavailable for %s: %s", request_id, exc)
        return Kept(redis="down")
    finally:
        await redis.aclose()


def no_timeline(
    evaluation: dict[str, Any], found: Kept, settings: Settings, now: float | None = None
) -> str:
    """Why a request has no timeline to show, the one reason the facts give: what the worker
    recorded in the evaluation (`timeline`: kept, or why not), whether this reader has a
    Redis and it answered, and the evaluation's age against its TTL."""
    recorded = evaluation.get("timeline")
    if recorded is None and found.evaluation is not None:
        # a worker that did not record it, but wrote the evaluation and not the timeline to
        # this Redis: its TRACEJUDGE_TIMELINES left this one out
        recorded = "off" if _flagged(evaluation) else "not_flagged"
    if recorded == "not_flagged":
        return (
            "not kept: the request passed, succeeded and is complete, no check or steer "
            "touched it, and the worker keeps the timelines of flagged requests only "
            "(TRACEJUDGE_TIMELINES=flagged; =all keeps every one)"
        )
    if recorded == "off":
        return "not kept: the worker that judged it has TRACEJUDGE_TIMELINES=off"
    if recorded == "no_redis":
        return (
            "not kept: the worker that judged it had no Redis (TRACEJUDGE_REDIS_URL), where "
            "timelines are kept"
        )
    if found.redis == "off":
        return (
            "not looked up: TRACEJUDGE_REDIS_URL is empty here, and timelines are kept in the "
            "worker's Redis"
        )
    if found.redis == "down":
        return f"not looked up: the Redis at {mask(settings.redis_url)} does not answer"
    age = (now if now is not None else time.time()) - float(evaluation.get("ts") or 0)
    if age > settings.evaluation_ttl_s:
        return (
            f"expired: judged {_duration(age)} ago, and timelines are kept for "
            f"TRACEJUDGE_EVALUATION_TTL_S={settings.evaluation_ttl_s}s"
        )
    return (
        f"not in the Redis at {mask(settings.redis_url)}: the worker that judged it keeps its "
        "verdicts and timelines in another one"
    )


def _flagged(e: dict[str, Any]) -> bool:
    # as judges/verdict/make.py decides which timelines TRACEJUDGE_TIMELINES=flagged keeps
    return (
        not e.get("passed")
        or not e.get("success")
        or bool(e.get("incomplete"))
        or e.get("judge_status") == "ok"
        or e.get("final") is False  # sent to the judge: kept as for a judged one
        or bool(e.get("interventions"))  # told while it ran, or a team's check found something
        or any(str(f.get("rule", "")).startswith("check:") for f in e.get("findings") or [])
    )


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.0f} minutes"


@dataclass(frozen=True)
class Found:
    evaluation: dict[str, Any] | None
    timeline: list[Any]
    no_timeline: str | None  # why there is no timeline (None: there is one)


async def fetch(settings: Settings, request_id: str) -> Found:
    """The request's latest evaluation, its timeline ([] when none was kept) and, without one,
    why."""
    found = await look_up(settings, request_id)
    evaluation = found.evaluation
    if evaluation is None:
        records = await read_since(settings, settings.topic(names.EVALUATIONS), LOOK_BACK_S)
        for key, value in records:  # the last one wins, as in Redis
            if key == request_id.encode():
                evaluation = json.loads(value)
    reason = None
    if evaluation is not None and not found.timeline:
        reason = no_timeline(evaluation, found, settings)
    return Found(evaluation, found.timeline, reason)


def _clock(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(text: Any) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= TEXT_WIDTH else flat[: TEXT_WIDTH - 1] + "…"


def render(
    evaluation: dict[str, Any], timeline: list[dict[str, Any]], no_timeline: str | None = None
) -> str:
    """`no_timeline`: why there is none, when there is none."""
    e = evaluation
    lines = [
        f"request {e['request_id']}  agent {e.get('agent_name') or '-'}  "
        f"closed by {e['closed_by']} at {_clock(e.get('ts'))}",
        f"score {score_shown(e)} ({'pass' if e['passed'] else 'fail'}; threshold "
        f"{e['warn_threshold']})  success {e['success']}  incomplete {e['incomplete']}  "
        f"judge {'pending' if e.get('final') is False else e['judge_status']}"
        + (f" ({e['judge_error']})" if e.get("judge_error") else ""),
    ]
    follow_up = origin_line(e.get("origin"))
    if follow_up:
        lines.append(follow_up)
    call = judge_call(e.get("judge"))
    if call:
        lines.append(f"judge: {call[0]}")
        lines += [f"  {note}" for note in call[1:]]
    lines.append(f"summary: {e['summary']}")
    scores = e.get("dimension_scores") or {}
    if scores:
        own = scores.get("criteria") or {}
        lines.append(
            "scores: "
            + "  ".join(f"{k} {v}" for k, v in scores.items() if k != "criteria")
            + "".join(f"  {k} {v} (the team's)" for k, v in own.items())
        )
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
        # with the goal reached, what is left is a failure to make good, not work remaining
        lines.append(
            "remaining:" if e.get("incomplete") else "to make good (the goal was reached):"
        )
        lines += [f"  - {_short(r)}" for r in e["remaining_steps"]]
    blame = blame_line(e.get("blame"))
    if blame:
        lines.append(blame)
    if e.get("interventions"):
        lines.append("interventions:")
        lines += [
            f"  {i.get('kind')} {i.get('crossed')} ({i.get('action')}) at step "
            f"{i.get('at_step', '?')}: "
            + (
                ("stopped" if i.get("action") == "stop" else "no step after it")
                if i.get("stopped_after")
                else f"went on {i.get('steps_after', '?')} steps"
            )
            for i in e["interventions"]
        ]
    usage = e.get("usage")
    if usage:
        cost = f", ${usage['cost_usd']:.4f}" if usage.get("cost_usd") is not None else ""
        lines.append(
            f"usage: {usage['model_calls']} model calls, {usage['input_tokens']} in / "
            f"{usage['output_tokens']} out tokens{cost}"
        )
    lines.append(_timeline(timeline, locate(e, timeline), no_timeline))
    return "\n".join(lines) + "\n"


def score_shown(e: dict[str, Any]) -> str:
    """The score as a person reads it beside the threshold: the rounded score, unless rounding
    would put a failing score at the threshold ("59.6", never "60 (fail; threshold 60)")."""
    exact, rounded = e.get("overall_exact"), e.get("overall_score")
    if (
        isinstance(exact, int | float)
        and rounded != exact
        and (rounded or 0) >= e.get("warn_threshold", 101) > exact
    ):
        return f"{exact:.1f}"
    return str(rounded)


def origin_line(origin: Any) -> str | None:
    """A follow-up's origin (an evaluation's `origin`, models/outputs.py `Origin`) in one line:
    the request it continues, its chain's first request when that is another, and the
    parent's verdict as the worker found it; None for the first request of a chain."""
    if not isinstance(origin, dict):
        return None
    parent = origin.get("request_id") or "?"
    root = origin.get("root_request_id")
    line = f"follow-up of {parent}" + (f" (chain from {root})" if root and root != parent else "")
    if not origin.get("found"):
        return line + ": its verdict not found (no Redis, expired, or never seen)"
    return (
        f"{line}: its score {origin.get('overall_score')}, success {origin.get('success')}, "
        f"incomplete {origin.get('incomplete')}, round {origin.get('reflection_round')}"
    )


def judge_call(judge: dict[str, Any] | None) -> list[str]:
    """The LLM judge's call (an evaluation's `judge`, models/outputs.py `JudgeCall`) as `show`
    and the explorer print it: its figures, then what was cut from its input when anything
    was; [] without one (a rule-only verdict). Read with .get: a record from another producer
    or an older worker may lack a field, and must still be shown."""
    if not judge:
        return []
    asked, answered = judge.get("requested_model") or "?", judge.get("returned_model")
    # the alias asked for and the snapshot that answered: a verdict's drift often starts here
    figures = [f"{asked} → {answered}" if answered and answered != asked else asked]
    figures.append(f"prompt {judge.get('prompt_version') or '?'}")
    if judge.get("cached"):
        figures.append("from the verdict cache (no call)")
    else:
        attempts = judge.get("attempts")
        figures.append(f"{attempts} attempt{'' if attempts == 1 else 's'}")
    if judge.get("latency_s") is not None:
        figures.append(f"{judge['latency_s']:.2f} s")
    tokens_in, tokens_out = judge.get("input_tokens"), judge.get("output_tokens")
    if tokens_in is not None or tokens_out is not None:
        cached = judge.get("cached_input_tokens")
        figures.append(
            f"{_count(tokens_in)} in{f' ({cached:,} cached)' if cached else ''} / "
            f"{_count(tokens_out)} out tokens"
        )
    elif not judge.get("cached"):
        figures.append("no token usage reported")
    if judge.get("cost_usd") is not None:
        cost = float(judge["cost_usd"])
        # a cheap model's call costs a few hundredths of a cent: never print it as $0.0000
        figures.append("<$0.0001" if 0 < cost < 0.0001 else f"${cost:.4f}")
    cut = []
    if judge.get("steps_omitted"):
        n = judge["steps_omitted"]
        cut.append(f"{n} step{'' if n == 1 else 's'} left out of the prompt")
    cut.extend(_left_out(judge.get("input_left_out")))
    if judge.get("input_halved"):
        cut.append("input sent at half size (the server said the context was exceeded)")
    return [", ".join(figures)] + (["; ".join(cut)] if cut else [])


# what else the judge's prompt shortened (JudgeCall.input_left_out), as `show` words it
_SHORTENED = {
    "failed_steps_shortened_to_digests": "shortened to a digest",
    "failed_steps_merged_into_repeats": "merged into entries of repeats",
    "failed_steps_listed_compactly": "listed only as index, tool and error head",
}


def _left_out(counts: Any) -> list[str]:
    if not isinstance(counts, dict):
        return []
    said = []
    failed = [f"{counts[k]} {v}" for k, v in _SHORTENED.items() if isinstance(counts.get(k), int)]
    if failed:
        said.append("failed steps " + ", ".join(failed))
    if isinstance(counts.get("planned_steps"), int):
        said.append(f"{counts['planned_steps']} planned steps left out")
    clipped = [k for k in ("goal", "final_output") if counts.get(f"{k}_clipped")]
    if clipped:
        said.append(f"{' and '.join(clipped)} clipped")
    return said


def _count(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def blame_line(blame: dict[str, Any] | None) -> str | None:
    """`blame: step 3 by Excel_Expert (rules, confidence 0.60): why`, or the abstention."""
    if not blame:
        return None
    if blame.get("abstain"):
        return f"blame: none named ({_short(str(blame.get('reason', '')))})"
    how = ", ".join(
        x
        for x in (
            blame.get("source"),
            None if blame.get("confidence") is None else f"confidence {blame['confidence']:.2f}",
        )
        if x
    )
    where = f"step {blame.get('step_index')}"
    where += f" by {blame['actor']}" if blame.get("actor") else ""
    where += f" ({how})" if how else ""
    return f"blame: {where}: {_short(str(blame.get('reason', '')))}"


def _timeline(timeline: list[dict[str, Any]], marks: Marks, no_timeline: str | None) -> str:
    """The steps in order, each with the findings it concerns (as the explorer marks them)."""
    if not timeline:
        return f"timeline: {no_timeline or 'none'}"
    start = next((t["ts"] for t in timeline if "ts" in t), None)
    rows = [f"timeline ({len(timeline)} events, texts clipped and masked):"]
    if marks.request_wide:
        rows.append(
            "  about the whole request: " + ", ".join(f["rule"] for f in marks.request_wide)
        )
    for i, entry in enumerate(timeline):
        offset = f"+{entry['ts'] - start:.2f}s" if start is not None and "ts" in entry else ""
        what = entry.get("tool") or entry.get("phase") or ""
        if entry.get("actor"):
            what = f"{entry['actor']}: {what}" if what else str(entry["actor"])
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
