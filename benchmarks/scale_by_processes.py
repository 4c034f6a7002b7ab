"""Scale by processes: bare Faust, one tracejudge worker, and as many workers as cores in the
consumer group, in one run on the same broker. (Until the child processes went, the second
system was one worker with its verdict process: BENCHMARKS.md has both runs.)

    python -m benchmarks.scale_by_processes [--requests 3000] [--rates 1000,2000,4000,6000]
                                            [--sweep-seconds 20]

For each system, started and warmed up first (one request through), then:
- **drain**: a backlog of `requests` x 10 contract events produced at once; events per second
  from the first to the last output record (broker timestamps), and CPU milliseconds per input
  event over *all* the system's processes, from the start of the
  backlog to its last output;
- **steady sweep**: the same fixed rates for every system, `--sweep-seconds` each; latency from
  a request's final event acknowledged to its output readable (tracejudge: the evaluation; bare
  Faust: the forwarded final event), p50/p99, requests with no output 5 s after the last was
  sent, and the highest rate whose p99 stays <= 100 ms with nothing left behind.
Starts the real Kafka and Redis like the tests do.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from benchmarks.pipeline import pct
from benchmarks.side_by_side import (
    EVENTS_PER_REQUEST,
    backlog,
    cpu_s,
    create,
    start_bare_faust,
)
from tests.integration.harness import WorkerProcess, produce, worker_env
from tests.realservices import ROOT, free_port, start_kafka, start_redis, stop_process

PARTITIONS = 4
P99_LIMIT_MS = 100.0


@dataclass
class System:
    """A running system under test: its processes, where events go in and outputs come out."""

    name: str
    source: str
    sink: str
    pids: Callable[[], list[int]]
    is_output: Callable[[bytes], bool]  # whether a sink record is a request's output
    stop: Callable[[], None]
    notes: list[str] = field(default_factory=list)

    def cpu(self) -> float:
        return sum(cpu_s(pid) for pid in self.pids())


async def start_tracejudge(
    name: str, kafka: str, redis: str, workdir: Path, workers: int
) -> System:
    slug = f"scale{workers}"  # topic and group names: no spaces
    base = worker_env(
        kafka,
        redis,
        workdir,
        slug,
        partitions=PARTITIONS,
        log_level="warning",
    )
    subprocess.run(  # noqa: ASYNC221 (a benchmark: one short command before timing starts)
        [sys.executable, "-m", "tracejudge.streams.cli", "topics"],
        cwd=ROOT,
        env={**os.environ, **base},
        check=True,
        capture_output=True,
    )
    procs = []
    for i in range(workers):
        env = {
            **base,
            "TRACEJUDGE_WEB_PORT": str(free_port()),
            "TRACEJUDGE_DATA_DIR": str(workdir / f"{slug}-data-{i}"),
        }
        procs.append(WorkerProcess(env, workdir / f"{slug}-{i}.log"))
    for worker in procs:
        worker.start(wait=False)
    for worker in procs:
        await asyncio.to_thread(worker.wait_healthy, 180)

    def stop() -> None:
        for worker in procs:
            worker.stop()

    first = procs[0]
    return System(
        name,
        first.topic("events"),
        first.topic("evaluations"),
        lambda: [w.process.pid for w in procs if w.process is not None],
        lambda value: True,
        stop,
    )


async def start_faust(kafka: str, workdir: Path) -> System:
    run = uuid.uuid4().hex[:6]
    source, sink = f"faust-{run}", f"faust-{run}-out"
    await create(kafka, [source, sink], PARTITIONS)
    process = start_bare_faust(kafka, source, sink, workdir, PARTITIONS)
    return System(
        "bare Faust agent, forward each (1 process)",
        source,
        sink,
        lambda: [process.pid],
        lambda value: b'"final_response"' in value,
        partial(stop_process, process),
    )


async def outputs_after(
    kafka: str, system: System, keys: set[bytes], timeout_s: float
) -> dict[bytes, int]:
    """Broker timestamp (ms) of the output of each request in `keys`, read from the start."""
    consumer = AIOKafkaConsumer(
        system.sink, bootstrap_servers=kafka, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    seen: dict[bytes, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < len(keys) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for r in records:
                    if r.key in keys and r.value is not None and system.is_output(r.value):
                        seen.setdefault(r.key, r.timestamp)
    finally:
        await consumer.stop()
    return seen


async def warm_up(kafka: str, system: System) -> None:
    lines = backlog(1, f"warm-{uuid.uuid4().hex[:6]}")
    await produce(kafka, system.source, lines)
    found = await outputs_after(kafka, system, {lines[-1][0]}, 180)
    if not found:
        raise TimeoutError(f"{system.name}: the warm-up request was not answered")
    await asyncio.sleep(2.0)


@dataclass(frozen=True)
class Drain:
    rate: float  # events per second, first to last output
    cpu_ms: float  # per input event, all processes
    produce_s: float
    span_s: float


async def drain(kafka: str, system: System, requests: int) -> Drain:
    lines = backlog(requests, f"drain-{uuid.uuid4().hex[:6]}")
    keys = {key for key, _ in lines[EVENTS_PER_REQUEST - 1 :: EVENTS_PER_REQUEST]}
    before = system.cpu()
    started = time.perf_counter()
    await produce(kafka, system.source, lines)
    produced = time.perf_counter() - started
    found = await outputs_after(kafka, system, keys, 900)
    cpu = system.cpu() - before
    if len(found) < len(keys):
        raise TimeoutError(f"{system.name}: {len(found)} of {len(keys)} requests answered")
    span = (max(found.values()) - min(found.values())) / 1000
    return Drain(len(lines) / span, cpu * 1000 / len(lines), produced, span)


@dataclass(frozen=True)
class Steady:
    rate: float
    p50_ms: float
    p99_ms: float
    unanswered: int
    late: float  # share of requests the load generator sent > 1 ms behind schedule

    @property
    def held(self) -> bool:
        return self.unanswered == 0 and self.p99_ms <= P99_LIMIT_MS


async def steady(kafka: str, system: System, rate: float, seconds: float) -> Steady:
    """Requests at a steady event rate; each final event's ack is timed by a callback, so a
    slow ack never holds the next request back."""
    lines = backlog(max(1, int(rate * seconds / EVENTS_PER_REQUEST)), f"s-{uuid.uuid4().hex[:6]}")
    requests = [lines[i : i + EVENTS_PER_REQUEST] for i in range(0, len(lines), EVENTS_PER_REQUEST)]
    consumer = AIOKafkaConsumer(
        system.sink, bootstrap_servers=kafka, group_id=None, auto_offset_reset="latest"
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka, acks="all", linger_ms=0)
    await consumer.start()
    await producer.start()
    acked: dict[bytes, float] = {}
    seen: dict[bytes, float] = {}

    async def read() -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batch.values():
                for r in records:
                    if r.key is not None and r.value is not None and system.is_output(r.value):
                        seen.setdefault(r.key, now)

    def timed(key: bytes, delivery: asyncio.Future[Any]) -> None:
        if not delivery.cancelled() and delivery.exception() is None:
            acked[key] = time.time()

    reader = asyncio.create_task(read())
    await asyncio.sleep(1.0)  # the reader settles at the end of the topic
    interval = EVENTS_PER_REQUEST / rate
    start, late = time.perf_counter(), 0
    try:
        for i, events in enumerate(requests):
            wait = start + i * interval - time.perf_counter()
            late += wait < -0.001
            await asyncio.sleep(max(0.0, wait))
            for key, value in events[:-1]:
                await producer.send(system.source, value, key=key)
            key, value = events[-1]
            delivery = await producer.send(system.source, value, key=key)
            delivery.add_done_callback(partial(timed, key))
        await asyncio.sleep(5.0)
    finally:
        reader.cancel()
        await producer.stop()
        await consumer.stop()
    latencies = [(seen[k] - t) * 1000 for k, t in acked.items() if k in seen]
    unanswered = len(requests) - len(latencies)
    if not latencies:
        return Steady(rate, float("nan"), float("nan"), unanswered, late / len(requests))
    return Steady(rate, pct(latencies, 50), pct(latencies, 99), unanswered, late / len(requests))


async def measure(
    kafka: str, system: System, requests: int, rates: list[float], seconds: float
) -> tuple[Drain, list[Steady]]:
    try:
        await warm_up(kafka, system)
        drained = await drain(kafka, system, requests)
        sweep = []
        for rate in rates:
            sweep.append(await steady(kafka, system, rate, seconds))
        return drained, sweep
    finally:
        system.stop()


async def main(requests: int, rates: list[float], seconds: float) -> None:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retries while topics settle
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-scale-"))
    kafka = start_kafka(workdir / "kafka")
    redis = start_redis(workdir / "redis")
    cores = os.cpu_count() or 1
    results: list[tuple[str, Drain, list[Steady]]] = []
    try:
        print(
            f"backlog {requests} requests x {EVENTS_PER_REQUEST} events, {PARTITIONS} "
            f"partitions, {cores} cores; sweep {', '.join(f'{r:g}' for r in rates)} events/s, "
            f"{seconds:g} s each"
        )
        starts: list[Callable[[], Any]] = [
            partial(start_faust, kafka.address, workdir),
            partial(
                start_tracejudge,
                "tracejudge: 1 worker",
                kafka.address,
                redis.address,
                workdir,
                1,
            ),
            partial(
                start_tracejudge,
                f"tracejudge: {cores} workers",
                kafka.address,
                redis.address,
                workdir,
                cores,
            ),
        ]
        for start in starts:
            system = await start()
            drained, sweep = await measure(kafka.address, system, requests, rates, seconds)
            results.append((system.name, drained, sweep))
            print(f"  done: {system.name}", flush=True)
    finally:
        kafka.stop()
        redis.stop()
    report(results)


def report(results: list[tuple[str, Drain, list[Steady]]]) -> None:
    faust = results[0]
    print(f"\n{'system':<46} {'drain ev/s':>10} {'CPU ms/ev':>9} {'max steady ev/s':>15}")
    for name, drained, sweep in results:
        held = [s.rate for s in sweep if s.held]
        best = max(held) if held else 0.0
        print(
            f"{name:<46} {drained.rate:>10.0f} {drained.cpu_ms:>9.3f} {best:>15.0f}"
            f"   (drain {drained.rate / faust[1].rate:.2f}x, CPU "
            f"{drained.cpu_ms / faust[1].cpu_ms:.2f}x bare Faust; backlog produced in "
            f"{drained.produce_s:.1f} s, drained in {drained.span_s:.1f} s)"
        )
    print("\nsteady rates: p50 / p99 ms, requests unanswered 5 s after the last, sent late")
    for name, _, sweep in results:
        print(f"  {name}")
        for s in sweep:
            mark = "ok" if s.held else "--"
            print(
                f"    {s.rate:>6.0f} ev/s  {s.p50_ms:7.1f} / {s.p99_ms:7.1f}  "
                f"unanswered {s.unanswered:>4}  late {s.late:5.1%}  {mark}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rates", default="1000,2000,4000,6000")
    parser.add_argument("--sweep-seconds", type=float, default=20.0)
    args = parser.parse_args()
    asyncio.run(main(args.requests, [float(r) for r in args.rates.split(",")], args.sweep_seconds))
