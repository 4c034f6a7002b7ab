"""What `tracejudge status` reports: topics with partitions, the last minute's records and the
group's lag, and each worker's /health. Read-only: nothing joins the group or commits."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from tracejudge.models import names
from tracejudge.streams.kafka.admin import partition_counts
from tracejudge.streams.kafka.security import client_options
from tracejudge.streams.settings import Settings

WINDOW_S = 60.0  # "the last minute"


@dataclass(frozen=True)
class TopicStatus:
    topic: str
    partitions: int
    records: int  # on the broker now (end minus start offsets)
    last_minute: int  # records written in the last minute
    lag: int | None  # input topics: records the worker group has not committed


@dataclass(frozen=True)
class WorkerStatus:
    url: str
    code: int  # HTTP status of /health; 0: unreachable
    status: str
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Status:
    settings: dict[str, Any]
    topics: list[TopicStatus]
    workers: list[WorkerStatus]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)


async def collect_status(settings: Settings, workers: list[str], timeout_s: float = 10.0) -> Status:
    topics = await asyncio.wait_for(_topics(settings), timeout_s)
    checked = await asyncio.gather(*(asyncio.to_thread(worker_health, url) for url in workers))
    return Status(settings.masked(), topics, list(checked))


async def _topics(settings: Settings) -> list[TopicStatus]:
    # a consumer of the worker group, never subscribed: OffsetFetch only, as the watchdog does
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        group_id=settings.app_id,
        enable_auto_commit=False,
    )
    counts = await partition_counts(settings)
    await consumer.start()
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
            minute_ago = int((time.time() - WINDOW_S) * 1000)
            since = await consumer.offsets_for_times({tp: minute_ago for tp in tps})
            recent = sum(ends[tp] - (since[tp].offset if since[tp] else ends[tp]) for tp in tps)
            lag = None
            if name in names.INPUTS:
                committed = {tp: await consumer.committed(tp) for tp in tps}
                lag = sum(ends[tp] - (committed[tp] or starts[tp]) for tp in tps)
            stored = sum(ends[tp] - starts[tp] for tp in tps)
            found.append(TopicStatus(topic, len(tps), stored, recent, lag))
        return found
    finally:
        await consumer.stop()


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
    return WorkerStatus(url, code, str(body.get("status", "?")), dict(body.get("counters", {})))


def render_status(status: Status) -> str:
    """The readable form: configuration, a table of topics, one line per worker."""
    s = status.settings
    lines = [
        "configuration (secrets masked)",
        f"  kafka {s['kafka_bootstrap']}  redis {s['redis_url'] or '(off)'}  group "
        f"{s['app_id']}  prefix {s['topic_prefix']}  mode {s['mode']}  enabled {s['enabled']}",
        f"  llm judge {'on: ' + str(s['llm_model']) if s['llm_judge_enabled'] else 'off'}  "
        f"warn threshold {s['warn_threshold']}  trace capture {s['trace_capture']}",
        "",
        f"{'topic':<40} {'partitions':>10} {'records':>10} {'last min':>9} {'group lag':>10}",
    ]
    for t in status.topics:
        lag = "-" if t.lag is None else str(t.lag)
        parts = str(t.partitions) if t.partitions else "missing"
        lines.append(f"{t.topic:<40} {parts:>10} {t.records:>10} {t.last_minute:>9} {lag:>10}")
    lines += ["", "workers"]
    if not status.workers:
        lines.append("  (none given: --worker URL, or TRACEJUDGE_STATUS_WORKERS)")
    for w in status.workers:
        c = w.counters
        seen = ", ".join(
            f"{k}={c[k]}" for k in ("events_added", "evaluations", "dead_lettered") if k in c
        )
        lines.append(f"  {w.url}  {w.status} ({w.code})" + (f"  {seen}" if seen else ""))
    return "\n".join(lines)
