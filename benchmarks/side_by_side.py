"""Issue 15's yardstick: the same backlog drained by raw aiokafka, bare Faust and tracejudge.

    python -m benchmarks.side_by_side [--requests 2000] [--partitions 4]

Starts the real Kafka and Redis like the tests do. Produces `requests` x 10 contract events as
a backlog on a fresh topic per system, then lets each system drain it and prints, side by side:
events per second (first to last output record, broker timestamps), CPU milliseconds per input
event (the consuming process's user + system time), and for tracejudge the changelog records
and bytes written per input event. Then tracejudge at steady rates of 25, 50, 75 and 100% of
the rate it drained at, `--sweep-seconds` each: verdict latency p50/p99, whether a backlog
built up, and the share of requests the load generator sent more than 1 ms behind schedule.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from benchmarks.pipeline import latency_probe, pct, topic_bytes
from tests.integration.harness import WorkerProcess, produce, wait_counter, worker_env
from tests.realservices import ROOT, start_kafka, start_redis
from tracejudge.models.names import TABLES, changelog_topic

EVENTS_PER_REQUEST = 10


def backlog(requests: int, run: str) -> list[tuple[bytes, bytes]]:
    """task_started, 4 x (reasoning_step, tool_call), final_response: ~160 bytes an event."""
    lines: list[tuple[bytes, bytes]] = []
    for r in range(requests):
        rid = f"{run}-{r}"
        events: list[dict[str, Any]] = [
            {
                "type": "task_started",
                "request_id": rid,
                "goal": f"refund order {r} for the customer",
            }
        ]
        for i in range(4):
            events.append(
                {
                    "type": "reasoning_step",
                    "request_id": rid,
                    "step_index": 2 * i + 1,
                    "phase": "plan",
                    "intent_summary": f"step {i}: look up what the order needs",
                }
            )
            events.append(
                {
                    "type": "tool_call",
                    "request_id": rid,
                    "step_index": 2 * i + 2,
                    "tool": ["get_order", "check_policy", "refund", "notify"][i],
                    "success": True,
                    "args_summary": json.dumps({"order": r}),
                    "result_preview": "ok",
                    "latency_ms": 12,
                }
            )
        events.append(
            {
                "type": "final_response",
                "request_id": rid,
                "step_index": 9,
                "output": f"Refunded order {r}: 20 EUR back to the card, customer notified.",
            }
        )
        lines += [(rid.encode(), json.dumps(e).encode()) for e in events]
    return lines


async def create(bootstrap: str, topics: list[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
    finally:
        await admin.close()


async def output_span(bootstrap: str, topic: str, expected: int, timeout_s: float) -> float:
    """Seconds from the first to the last record of `topic`, once it holds `expected`."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    stamps: list[int] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(stamps) < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            stamps += [r.timestamp for rs in batch.values() for r in rs]
    finally:
        await consumer.stop()
    if len(stamps) < expected:
        raise TimeoutError(f"{topic}: {len(stamps)} of {expected} records")
    return (max(stamps) - min(stamps)) / 1000


async def first_record(bootstrap: str, topic: str, timeout_s: float) -> None:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if any((await consumer.getmany(timeout_ms=100)).values()):
                return
    finally:
        await consumer.stop()
    raise TimeoutError(f"nothing on {topic}")


def cpu_s(pid: int, descendants: bool = True) -> float:
    """User + system CPU seconds of a process and (unless told not to) its live descendants
    (any process a system starts counts)."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
    tree, grew = {pid}, descendants
    while grew:
        more = {p for p, f in stats.items() if int(f[1]) in tree} - tree
        tree, grew = tree | more, bool(more)
    ticks = sum(int(stats[p][11]) + int(stats[p][12]) for p in tree if p in stats)
    return ticks / os.sysconf("SC_CLK_TCK")


async def raw_passthrough(
    bootstrap: str, source: str, sink: str, events: int
) -> tuple[float, float]:
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=f"raw-{source}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await consumer.start()
    await producer.start()
    before, seen = time.process_time(), 0
    try:
        while seen < events:
            batch = await consumer.getmany(timeout_ms=500, max_records=500)
            pending = [
                await producer.send(sink, r.value, key=r.key) for rs in batch.values() for r in rs
            ]
            await asyncio.gather(*pending)
            await consumer.commit()
            seen += len(pending)
    finally:
        cpu = time.process_time() - before
        await producer.stop()
        await consumer.stop()
    return await output_span(bootstrap, sink, events, 60), cpu


FAUST_APP = textwrap.dedent(
    """
    import sys, faust
    bootstrap, source, sink, datadir, partitions = sys.argv[1:6]
    sys.argv[1:6] = []
    app = faust.App("bare-" + source, broker="kafka://" + bootstrap, datadir=datadir,
                    processing_guarantee="at_least_once", consumer_auto_offset_reset="earliest",
                    producer_acks=-1, web_enabled=False, topic_partitions=int(partitions))
    src = app.topic(source, key_type=bytes, value_type=bytes, key_serializer="raw",
                    value_serializer="raw")
    dst = app.topic(sink, key_type=bytes, value_type=bytes, key_serializer="raw",
                    value_serializer="raw")

    @app.agent(src, concurrency=1)
    async def forward(stream):
        async for event in stream.events():
            await dst.send(key=event.key, value=event.value)

    app.main()
    """
)


def start_bare_faust(
    bootstrap: str, source: str, sink: str, workdir: Path, partitions: int
) -> subprocess.Popen[bytes]:
    """The bare Faust agent (FAUST_APP) forwarding `source` to `sink`, in a process of its own."""
    script = workdir / "bare_faust.py"
    script.write_text(FAUST_APP)
    return subprocess.Popen(
        [
            sys.executable,
            str(script),
            bootstrap,
            source,
            sink,
            str(workdir / "faust-data"),
            str(partitions),
            "worker",
            "-l",
            "warn",
        ],
        stdout=(workdir / "faust.log").open("wb"),
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )


async def bare_faust(
    bootstrap: str, source: str, sink: str, events: int, workdir: Path
) -> tuple[float, float]:
    process = start_bare_faust(bootstrap, source, sink, workdir, PARTITIONS)
    try:
        await first_record(bootstrap, sink, 120)  # started: what follows is the work
        started = cpu_s(process.pid)
        span = await output_span(bootstrap, sink, events, 600)
        return span, cpu_s(process.pid) - started
    finally:
        process.terminate()
        process.wait(30)


async def tracejudge(
    kafka: str, redis: str, lines: list[tuple[bytes, bytes]], workdir: Path
) -> dict[str, Any]:
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    env = worker_env(kafka, redis, workdir, "side", partitions=PARTITIONS)
    worker = WorkerProcess(env, workdir / "worker.log")
    subprocess.run(  # noqa: ASYNC221 (a benchmark: one short command before timing starts)
        [sys.executable, "-m", "tracejudge.streams.cli", "topics"],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    await produce(kafka, worker.topic("events"), lines)
    worker.start(wait=False)
    assert worker.process is not None
    requests = len(lines) // EVENTS_PER_REQUEST
    try:
        await first_record(kafka, worker.topic("evaluations"), 180)
        started = cpu_s(worker.process.pid)
        await wait_counter(worker, requests, timeout_s=1800)
        span = await output_span(kafka, worker.topic("evaluations"), requests, 60)
        cpu = cpu_s(worker.process.pid) - started
        await asyncio.sleep(2.0)  # the last changelog writes reach the broker
        records = size = 0
        for table in TABLES:
            topic = changelog_topic(worker.settings.app_id, table)
            count, nbytes = await topic_bytes(kafka, topic)
            records, size = records + count, size + nbytes
        sweep: list[tuple[float, float, Steady]] = []
        for share in SWEEP if SWEEP_SECONDS > 0 else ():
            rate = share * len(lines) / span
            sweep.append((share, rate, await steady(worker, kafka, rate, SWEEP_SECONDS)))
    finally:
        worker.stop()
    return {"span": span, "cpu": cpu, "records": records, "bytes": size, "sweep": sweep}


@dataclass(frozen=True)
class Steady:
    """One steady rate: verdict latency (final response acked -> evaluation readable) and where
    it went; requests not judged 5 s after the last was sent (a backlog that built up); the
    share of requests the load generator sent more than 1 ms behind schedule."""

    p50_ms: float
    p99_ms: float
    worker_p50_ms: float  # final response acked -> the worker sent its evaluation
    unjudged: int
    late: float


async def steady(worker: WorkerProcess, kafka: str, rate: float, seconds: float) -> Steady:
    """Requests at a steady event rate for `seconds`, timed per request.

    Each request goes out on its schedule; its final response's acknowledgement is timed by a
    callback, not awaited. Awaiting it (as this did before 2026-11-24) held the next request
    back whenever an ack took longer than the interval, and the requests held back then went
    out together: at 4,500 events/s 8-14% of them left more than 1 ms late, in bursts the
    load was not meant to have. The split at the evaluation's own timestamp (set when the
    worker sends it; wall clock, same host) tells the worker's share from the delivery's."""
    run = uuid.uuid4().hex[:6]
    requests = backlog(max(1, int(rate * seconds / EVENTS_PER_REQUEST)), f"steady-{run}")
    by_request = [
        requests[i : i + EVENTS_PER_REQUEST] for i in range(0, len(requests), EVENTS_PER_REQUEST)
    ]
    consumer, producer = latency_probe(kafka, worker.topic("evaluations"))
    await consumer.start()
    await producer.start()
    acked: dict[bytes, float] = {}  # wall clock, seconds
    seen: dict[bytes, tuple[float, float]] = {}  # (read, the evaluation's timestamp)

    async def read() -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batch.values():
                for r in records:
                    if r.key is not None:
                        seen.setdefault(r.key, (now, r.timestamp / 1000))

    def timed(key: bytes, delivery: asyncio.Future[Any]) -> None:
        if not delivery.cancelled() and delivery.exception() is None:
            acked[key] = time.time()

    reader = asyncio.create_task(read())
    await asyncio.sleep(1.0)  # the reader settles at the end of the topic
    interval = EVENTS_PER_REQUEST / rate
    topic = worker.topic("events")
    start = time.perf_counter()
    late = 0
    try:
        for i, events in enumerate(by_request):
            wait = start + i * interval - time.perf_counter()
            late += wait < -0.001
            await asyncio.sleep(max(0.0, wait))
            for key, value in events[:-1]:
                await producer.send(topic, value, key=key)
            key, value = events[-1]
            delivery = await producer.send(topic, value, key=key)
            delivery.add_done_callback(partial(timed, key))
        await asyncio.sleep(5.0)
    finally:
        reader.cancel()
        await producer.stop()
        await consumer.stop()
    judged = [(seen[k], t) for k, t in acked.items() if k in seen]
    unjudged, late_share = len(by_request) - len(judged), late / len(by_request)
    if not judged:
        return Steady(float("nan"), float("nan"), float("nan"), unjudged, late_share)
    total = [(read - t) * 1000 for (read, _), t in judged]
    in_worker = [(sent - t) * 1000 for (_, sent), t in judged]
    return Steady(pct(total, 50), pct(total, 99), pct(in_worker, 50), unjudged, late_share)


SWEEP = (0.25, 0.5, 0.75, 1.0)
SWEEP_SECONDS = 60.0


PARTITIONS = 4


async def main(requests: int) -> None:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retries while topics settle
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-side-"))
    kafka = start_kafka(workdir / "kafka")
    redis = start_redis(workdir / "redis")
    try:
        run = uuid.uuid4().hex[:6]
        lines = backlog(requests, run)
        events = len(lines)
        size = sum(len(v) for _, v in lines) / events
        print(
            f"backlog: {requests} requests x {EVENTS_PER_REQUEST} = {events} events, "
            f"{size:.0f} bytes each, {PARTITIONS} partitions"
        )
        rows = []
        src, dst = f"raw-{run}", f"raw-{run}-out"
        await create(kafka.address, [src, dst], PARTITIONS)
        await produce(kafka.address, src, lines)
        span, cpu = await raw_passthrough(kafka.address, src, dst, events)
        rows.append(("raw aiokafka consume + forward", events / span, cpu * 1000 / events, ""))
        src, dst = f"faust-{run}", f"faust-{run}-out"
        await create(kafka.address, [src, dst], PARTITIONS)
        await produce(kafka.address, src, lines)
        span, cpu = await bare_faust(kafka.address, src, dst, events, workdir)
        faust_rate = events / span
        rows.append(("bare Faust agent, forward each", faust_rate, cpu * 1000 / events, ""))
        result = await tracejudge(kafka.address, redis.address, lines, workdir / "tj")
        rate = events / result["span"]
        rows.append(
            (
                "tracejudge worker, rules only, Redis on",
                rate,
                result["cpu"] * 1000 / events,
                f"{result['records'] / events:.2f} changelog records and "
                f"{result['bytes'] / events:.0f} bytes per event; "
                f"{rate / faust_rate:.2f} of bare Faust",
            )
        )
        print(f"{'system':<42} {'events/s':>9} {'CPU ms/event':>13}")
        for name, r, c, note in rows:
            print(f"{name:<42} {r:>9.0f} {c:>13.3f}  {note}")
        if result["sweep"]:
            print(
                f"tracejudge at a steady rate, {SWEEP_SECONDS:g} s each (final response acked "
                "-> evaluation readable):"
            )
            for share, rate, r in result["sweep"]:
                print(
                    f"  {share:>4.0%} of its maximum ({rate:>5.0f} events/s): "
                    f"p50 {r.p50_ms:7.1f} ms (in the worker {r.worker_p50_ms:6.1f})  "
                    f"p99 {r.p99_ms:7.1f} ms  not judged 5 s after the last request: "
                    f"{r.unjudged}  sent late: {r.late:.1%}"
                )
    finally:
        kafka.stop()
        redis.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--sweep-seconds", type=float, default=60.0, help="per steady rate; 0: no sweep"
    )
    args = parser.parse_args()
    PARTITIONS = args.partitions
    SWEEP_SECONDS = args.sweep_seconds
    asyncio.run(main(args.requests))
