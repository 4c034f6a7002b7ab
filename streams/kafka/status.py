"""What `tracejudge status` reports: topics with partitions, the last minute's records and the
group's lag, the judge queue, and each worker's /health. Read-only: nothing joins a group or
commits."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from tracejudge.judges.agreement.action_effects import ActionTally
from tracejudge.judges.agreement.tally import Tally
from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.streams.agreement.actions import (
    action_lines,
    actions_json,
    steer_lines,
    steers_json,
)
from tracejudge.streams.agreement.live import agreement_store
from tracejudge.streams.agreement.report import agreement_json, agreement_lines
from tracejudge.streams.agreement.store import AgreementUnavailable
from tracejudge.streams.agreement.thresholds import threshold_lines, thresholds_json
from tracejudge.streams.kafka.admin import partition_counts
from tracejudge.streams.kafka.io import read_since
from tracejudge.streams.kafka.security import client_options
from tracejudge.streams.shared.outputs import redis_client
from tracejudge.streams.shared.visible import visible_lines

WINDOW_S = 60.0  # "the last minute"
MODES_SINCE_S = 3600.0  # the failure modes announced this long back are shown
LAST_BATCH_WAIT_S = 2.0  # reading the input partitions' last batches (`_true_ends`)


@dataclass(frozen=True)
class TopicStatus:
    topic: str
    partitions: int
    records: int  # on the broker now (end minus start offsets)
    last_minute: int  # records written in the last minute
    lag: int | None  # input topics: records the worker group has not committed; the judge
    # requests: jobs the judge group has not committed


@dataclass(frozen=True)
class WorkerStatus:
    url: str
    code: int  # HTTP status of /health; 0: unreachable
    status: str
    counters: dict[str, int] = field(default_factory=dict)
    # where it judges: its judge consumer's queue (`judge` in /health)
    judge: dict[str, Any] | None = None
    # whether it signs control records, its key id, what agents reported (`control` in /health)
    control: dict[str, Any] | None = None


@dataclass(frozen=True)
class Status:
    settings: dict[str, Any]
    topics: list[TopicStatus]
    workers: list[WorkerStatus]
    # agent -> agreement figures from the shared tally in Redis (`agreement/report.py`); None:
    # no Redis (no live agreement) or Redis unreachable (`agreement_error` says which)
    agreement: dict[str, Any] | None = None
    agreement_error: str | None = None
    # agent -> action -> the effect of the actions asked (`agreement/actions.py`);
    # None where agreement is (the same Redis, read with it)
    actions: dict[str, Any] | None = None
    # each agent's alert threshold in use, calibrated or configured (`agreement/thresholds.py`);
    # None where agreement is
    thresholds: dict[str, Any] | None = None
    # agent -> loop rule -> what came of its steers (`agreement/actions.py`); None where
    # agreement is
    steers: dict[str, Any] | None = None
    # the failure modes announced in the last hour, oldest first (the modes topic's records);
    # None: the topic could not be read
    modes: list[dict[str, Any]] | None = None

    @property
    def judge_waiting(self) -> int | None:
        """Judge jobs the judge group has not committed (being judged or waiting)."""
        judge = settings_topic(self.settings, names.JUDGE_REQUESTS)
        return next((t.lag for t in self.topics if t.topic == judge), None)

    @property
    def judge_oldest_age_s(self) -> float | None:
        """The oldest unfinished judge job's age as the judging workers given report it; None
        when none of them reports a judge queue."""
        ages = [
            float(w.judge["oldest_job_age_s"])
            for w in self.workers
            if w.judge is not None and isinstance(w.judge.get("oldest_job_age_s"), int | float)
        ]
        return max(ages) if ages else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)


async def collect_status(settings: Settings, workers: list[str], timeout_s: float = 10.0) -> Status:
    topics = await asyncio.wait_for(_topics(settings), timeout_s)
    checked = await asyncio.gather(*(asyncio.to_thread(worker_health, url) for url in workers))
    tally, acted, error = await _agreement(settings, timeout_s)
    modes = await _mode_alerts(settings, timeout_s)
    return Status(
        settings.masked(),
        topics,
        list(checked),
        None if tally is None else agreement_json(tally),
        error,
        None if acted is None else actions_json(acted),
        None if tally is None else thresholds_json(tally, settings, time.time()),
        None if acted is None else steers_json(acted),
        modes,
    )


async def _mode_alerts(settings: Settings, timeout_s: float) -> list[dict[str, Any]] | None:
    """The modes topic's announcements of the last hour (None: it could not be read)."""
    try:
        records = await asyncio.wait_for(
            read_since(settings, settings.topic(names.MODES), MODES_SINCE_S), timeout_s
        )
    except (TimeoutError, KafkaError):
        return None
    found = []
    for _, value in records:
        try:
            alert = json.loads(value)
        except ValueError:
            continue  # anyone who can write the topic can write anything: not shown
        if isinstance(alert, dict) and isinstance(alert.get("mode"), dict):
            found.append(alert)
    return found


def mode_lines(alerts: list[dict[str, Any]] | None, most: int = 20) -> list[str]:
    """Per agent and mode, its latest announcement of the last hour: loud first (new or jump,
    not quiet since), then those quiet again."""
    if alerts is None:
        return ["  the modes topic could not be read"]
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for alert in alerts:
        latest[(str(alert.get("agent_name")), str(alert["mode"].get("key")))] = alert
    if not latest:
        return ["  none announced"]
    ranked = sorted(latest.values(), key=lambda a: (a.get("kind") == "quiet", -_ts(a)))
    lines = []
    for a in ranked[:most]:
        when = time.strftime("%H:%M:%S", time.gmtime(_ts(a)))
        name = str(a["mode"].get("name"))[:110]
        said = f"{a.get('kind')} at {when}, {a.get('runs')} runs in the window"
        lines.append(f"  {a.get('agent_name') or '(none)'}: {name}  ({said})")
    if len(ranked) > most:
        lines.append(f"  and {len(ranked) - most} more (tracejudge tail modes --from-beginning)")
    return lines


def _ts(alert: dict[str, Any]) -> float:
    ts = alert.get("ts")
    return float(ts) if isinstance(ts, int | float) else 0.0


async def _agreement(
    settings: Settings, timeout_s: float
) -> tuple[Tally | None, ActionTally | None, str | None]:
    """The tallies every worker and judge process counts into, read once."""
    redis = redis_client(settings.redis_url, timeout_s=min(timeout_s, 3.0))
    if redis is None:
        return None, None, "off: no Redis (TRACEJUDGE_REDIS_URL is empty)"
    store = agreement_store(settings, redis)
    assert store is not None
    try:
        return await store.tally(), await store.action_tally(), None
    except AgreementUnavailable as exc:
        return None, None, f"Redis unreachable: {exc}"
    finally:
        await redis.aclose()


def settings_topic(masked: dict[str, Any], name: str) -> str:
    """A topic's full name from the (masked) settings dump, as `Settings.topic` names it."""
    return f"{masked.get('topic_prefix') or ''}{name}"


async def _topics(settings: Settings) -> list[TopicStatus]:
    # consumers of the worker group and of the judge group, never subscribed: OffsetFetch
    # only, as the watchdog does
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        group_id=settings.app_id,
        enable_auto_commit=False,
    )
    judges = AIOKafkaConsumer(
        **client_options(settings),
        group_id=f"{settings.app_id}{names.JUDGE_GROUP_SUFFIX}",
        enable_auto_commit=False,
    )
    counts = await partition_counts(settings)
    await consumer.start()
    await judges.start()
    try:
        found = []
        for name in (*names.INPUTS, *names.OUTPUTS, *names.INTERNAL):
            topic = settings.topic(name)
            tps = [TopicPartition(topic, p) for p in range(counts.get(topic, 0))]
            if not tps:
                found.append(TopicStatus(topic, 0, 0, 0, None))
                continue
            ends = await consumer.end_offsets(tps)
            starts = await consumer.beginning_offsets(tps)
            if name in names.INPUTS:
                ends = await _true_ends(settings, ends, starts)
            minute_ago = int((time.time() - WINDOW_S) * 1000)
            since = await consumer.offsets_for_times({tp: minute_ago for tp in tps})
            recent = sum(ends[tp] - (since[tp].offset if since[tp] else ends[tp]) for tp in tps)
            lag = None
            # the session and modes agents read theirs in the worker's group, the judge stage
            # its own
            group = judges if name == names.JUDGE_REQUESTS else consumer
            if name in (*names.INPUTS, names.JUDGE_REQUESTS, names.SESSION_TURNS, names.MODE_RUNS):
                committed = {tp: await group.committed(tp) for tp in tps}
                # never negative: a committed offset past the end would be a broker's
                # miscount, which `_true_ends` corrects where the records show it
                lag = sum(max(0, ends[tp] - (committed[tp] or starts[tp])) for tp in tps)
            stored = sum(ends[tp] - starts[tp] for tp in tps)
            found.append(TopicStatus(topic, len(tps), stored, recent, lag))
        return found
    finally:
        await consumer.stop()
        await judges.stop()


async def _true_ends(
    settings: Settings, ends: dict[TopicPartition, int], starts: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Each partition's end as its records show it: one past the last record's offset.

    A Kafka broker's end offset (the high watermark) is exactly that. The demo's embedded
    broker (Tansu) answers one past the *first* offset of the last record batch, so a batch of
    several records is counted as one: after the worker commits past such a batch, committed
    offset minus end offset made a negative lag (and a real lag looked smaller). Reading the
    last batch of each non-empty partition gives the figure any broker agrees with; the
    reported end is kept where nothing comes back in time (a transaction marker last)."""
    wanted = {tp: end for tp, end in ends.items() if end > starts[tp]}
    if not wanted:
        return ends
    reader = AIOKafkaConsumer(**client_options(settings), group_id=None, enable_auto_commit=False)
    await reader.start()
    found = dict(ends)
    try:
        reader.assign(list(wanted))
        for tp, end in wanted.items():
            reader.seek(tp, end - 1)
        deadline = time.monotonic() + LAST_BATCH_WAIT_S
        pending = set(wanted)
        while pending and time.monotonic() < deadline:
            batch = await reader.getmany(*pending, timeout_ms=200)
            for tp, records in batch.items():
                if records:
                    found[tp] = max(found[tp], records[-1].offset + 1)
                    pending.discard(tp)
    finally:
        await reader.stop()
    return found


def worker_health(url: str, timeout_s: float = 3.0) -> WorkerStatus:
    """GET {url}/health: the worker's own view (200 ready, 503 not, with its counters)."""
    target = url.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as resp:
            body, code = json.loads(resp.read() or b"{}"), resp.status
    except urllib.error.HTTPError as exc:
        body, code = json.loads(exc.read() or b"{}"), exc.code
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return WorkerStatus(url, 0, f"unreachable ({getattr(exc, 'reason', exc)})")
    judge, control = body.get("judge"), body.get("control")
    return WorkerStatus(
        url,
        code,
        str(body.get("status", "?")),
        dict(body.get("counters", {})),
        judge if isinstance(judge, dict) else None,
        control if isinstance(control, dict) else None,
    )


def render_status(status: Status) -> str:
    """The readable form: configuration, a table of topics, one line per worker."""
    s = status.settings
    lines = [
        "configuration (secrets masked)",
        f"  kafka {s['kafka_bootstrap']}  redis {s['redis_url'] or '(off)'}  group "
        f"{s['app_id']}  prefix {s['topic_prefix']}  mode {s['mode']}  enabled {s['enabled']}",
        f"  llm judge {'on: ' + str(s['llm_model']) if s['llm_judge_enabled'] else 'off'}  "
        f"warn threshold {s['warn_threshold']}"
        + (" (agents with a calibration use theirs)" if s.get("calibration_enabled") else "")
        + f"  trace capture {s['trace_capture']}",
        "",
        f"{'topic':<40} {'partitions':>10} {'records':>10} {'last min':>9} {'group lag':>10}",
    ]
    for t in status.topics:
        lag = "-" if t.lag is None else str(t.lag)
        parts = str(t.partitions) if t.partitions else "missing"
        lines.append(f"{t.topic:<40} {parts:>10} {t.records:>10} {t.last_minute:>9} {lag:>10}")
    if s.get("llm_judge_enabled"):
        waiting = status.judge_waiting
        oldest = status.judge_oldest_age_s
        lines += [
            "",
            "judge queue: "
            + ("? jobs" if waiting is None else f"{waiting} jobs")
            + " waiting or being judged, oldest "
            + ("unknown (give a judging worker's URL)" if oldest is None else f"{oldest:.0f}s"),
        ]
    lines += ["", "workers"]
    if not status.workers:
        lines.append("  (none given: --worker URL, or TRACEJUDGE_STATUS_WORKERS)")
    for w in status.workers:
        c = w.counters
        seen = ", ".join(
            f"{k}={c[k]}" for k in ("events_added", "evaluations", "dead_lettered") if k in c
        )
        lines.append(f"  {w.url}  {w.status} ({w.code})" + (f"  {seen}" if seen else ""))
        if w.control is not None:
            lines += control_lines(w.control)
    lines += ["", "agreement with outcomes (per agent, within the retention)"]
    if status.agreement_error is not None:
        lines.append(f"  {status.agreement_error}")
    elif not status.agreement:
        lines.append("  no outcomes joined to verdicts yet")
    else:
        lines += agreement_lines(status.agreement)
    lines += [
        "",
        "alert thresholds in use (per agent: calibrated from its outcomes, or configured)",
    ]
    lines += threshold_lines(status.thresholds, s["warn_threshold"], status.agreement_error)
    lines += ["", "effect of the actions asked (per agent and action, within the retention)"]
    if status.agreement_error is not None:
        lines.append(f"  {status.agreement_error}")
    elif not status.actions:
        lines.append("  no reflection requested yet")
    else:
        lines += action_lines(status.actions)
    lines += ["", "what each steer did (per agent and loop rule, within the retention)"]
    if status.agreement_error is not None:
        lines.append(f"  {status.agreement_error}")
    elif not status.steers:
        lines.append("  no loop steered yet")
    else:
        lines += steer_lines(status.steers)
    lines += ["", "failure modes announced in the last hour (per agent and mode, the latest)"]
    lines += mode_lines(status.modes)
    return visible_lines(lines)  # agent names, errors: trace text, shown, never obeyed


def control_lines(control: dict[str, Any]) -> list[str]:
    """A worker's signing, and each agent that reported trouble with its control records."""
    key = control.get("key")
    lines = [
        f"    signs control with {key}"
        if control.get("signs")
        else "    signs no control record (TRACEJUDGE_CONTROL_KEYS unset): agents that "
        "verify refuse them"
    ]
    agents = control.get("agents")
    for agent, tally in sorted(agents.items() if isinstance(agents, dict) else []):
        if not isinstance(tally, dict):
            continue
        refused = {k[len("refused_") :]: n for k, n in tally.items() if k.startswith("refused_")}
        unchecked = int(tally.get("runs_not_verifying", 0))
        if not refused and not unchecked:
            continue
        said = ", ".join(f"{n} {why}" for why, n in sorted(refused.items()))
        parts = [f"refused {sum(refused.values())} ({said})"] if refused else []
        if unchecked:
            parts.append(
                f"{unchecked} of {tally.get('runs', '?')} runs hold no key (obeyed unchecked)"
            )
        lines.append(f"    agent {agent}: " + "; ".join(parts) + _hint(refused))
    return lines


def _hint(refused: dict[str, int]) -> str:
    if refused.get("unknown_key") or refused.get("bad_signature"):
        return ": its TRACEJUDGE_CONTROL_KEYS and the worker's differ"
    if refused.get("unsigned"):
        return ": it verifies, the worker does not sign"
    if refused.get("expired_key"):
        return ": the key's last day has passed on the agent"
    return ""
