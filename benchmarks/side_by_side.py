"""The per-core yardstick: bare Faust, one tracejudge worker, and as many workers as
cores in the consumer group, in one run on the same broker, with raw aiokafka as the floor.

    python -m benchmarks.side_by_side [--requests 6000] [--rates 1000,2000,4000,6000]
                                      [--sweep-seconds 20] [--drain-rounds 3]
                                      [--write-headline]

Starts the real Kafka (the group coordinator waits 3 s for a new group's members, Kafka's
production default, so workers started together share the first assignment) and Redis.
For each system:
- **drain**: `requests` x 10 contract events are on a fresh topic before the system starts;
  events per second from the first to the last request's output (broker timestamps), and CPU
  milliseconds per input event over *all* the system's processes in that span; the systems
  take turns `--drain-rounds` times (3), and each one's fastest drain and lowest CPU count
  (every round is printed): one drain moved by up to a fifth between runs of the same code;
- **steady sweep**: the same fixed rates and load generator for every system, `--sweep-seconds`
  each; latency from a request's final event acknowledged to its output readable (tracejudge:
  the evaluation; bare Faust: the forwarded final event), p50/p99, requests with no output 5 s
  after the last was sent, and the highest rate whose p99 stays <= 100 ms with nothing left
  behind.
The last lines print the three per-core bars against bare Faust. `--write-headline` also
writes the results, with the commit they ran on, over the headline table of BENCHMARKS.md
(between its `side-by-side headline` markers).
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from benchmarks.pipeline import pct
from tests.integration.harness import WorkerProcess, produce, worker_env
from tests.realservices import (
    KAFKA_PROPERTIES,
    ROOT,
    free_port,
    launch_kafka,
    start_redis,
    stop_process,
)

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


@dataclass
class System:
    """A system under test: where events go in and outputs come out, how to start it."""

    name: str
    source: str
    sink: str
    is_output: Callable[[bytes], bool]  # whether a sink record is a request's output
    launch: Callable[[], list[subprocess.Popen[bytes]]]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workers: list[WorkerProcess] = field(default_factory=list)

    def start(self) -> None:
        self.processes = self.launch()

    def cpu(self) -> float:
        return sum(cpu_s(p.pid) for p in self.processes)

    def stop(self) -> None:
        for process in self.processes:
            stop_process(process)


async def tracejudge_system(
    name: str,
    kafka: str,
    redis: str,
    workdir: Path,
    workers: int,
    env: dict[str, str] | None = None,
) -> System:
    """`env`: more environment for its processes (settings, or PYTHONPATH for another tree)."""
    slug = f"side{workers}"  # topic and group names: no spaces
    base = {
        **worker_env(kafka, redis, workdir, slug, partitions=PARTITIONS, log_level="warning"),
        **(env or {}),
    }
    subprocess.run(  # noqa: ASYNC221 (a benchmark: one short command before timing starts)
        [sys.executable, "-m", "tracejudge.streams.cli", "topics"],
        cwd=ROOT,
        env={**os.environ, **base},
        check=True,
        capture_output=True,
    )
    procs = [
        WorkerProcess(
            {
                **base,
                "TRACEJUDGE_WEB_PORT": str(free_port()),
                "TRACEJUDGE_DATA_DIR": f"{base['TRACEJUDGE_DATA_DIR']}-{i}",  # unique per run
            },
            workdir / f"{slug}-{i}.log",
        )
        for i in range(workers)
    ]

    def launch() -> list[subprocess.Popen[bytes]]:
        for worker in procs:
            worker.start(wait=False)
        return [w.process for w in procs if w.process is not None]

    first = procs[0]
    return System(
        name,
        first.topic("events"),
        first.topic("evaluations"),
        lambda value: True,
        launch,
        workers=procs,
    )


async def faust_system(kafka: str, workdir: Path) -> System:
    run = uuid.uuid4().hex[:6]
    source, sink = f"faust-{run}", f"faust-{run}-out"
    await create(kafka, [source, sink], PARTITIONS)
    return System(
        "bare Faust agent, forward each (1 process)",
        source,
        sink,
        lambda value: b'"final_response"' in value,
        lambda: [start_bare_faust(kafka, source, sink, workdir, PARTITIONS)],
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


@dataclass(frozen=True)
class Drain:
    rate: float  # events per second, first to last output
    cpu_ms: float  # per input event, all processes


async def drain(kafka: str, system: System, requests: int) -> Drain:
    """The backlog goes in first, then the system starts: it drains what is already there."""
    lines = backlog(requests, f"drain-{uuid.uuid4().hex[:6]}")
    keys = {key for key, _ in lines[EVENTS_PER_REQUEST - 1 :: EVENTS_PER_REQUEST]}
    await produce(kafka, system.source, lines)
    system.start()
    await first_record(kafka, system.sink, 180)  # started: what follows is the work
    before = system.cpu()
    found = await outputs_after(kafka, system, keys, 900)
    cpu = system.cpu() - before
    if len(found) < len(keys):
        raise TimeoutError(f"{system.name}: {len(found)} of {len(keys)} requests answered")
    span = (max(found.values()) - min(found.values())) / 1000
    return Drain(len(lines) / span, cpu * 1000 / len(lines))


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
    """Requests at a steady event rate, each on its schedule; each final event's ack is timed
    by a callback, not awaited, so a slow ack never holds the next request back (awaiting it
    sent the held-back requests in bursts the load was not meant to have)."""
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
        drained = await drain(kafka, system, requests)
        for worker in system.workers:
            await asyncio.to_thread(worker.wait_healthy, 180)
        await asyncio.sleep(2.0)
        return drained, [await steady(kafka, system, rate, seconds) for rate in rates]
    finally:
        system.stop()


P99_LIMIT_MS = 100.0
PARTITIONS = 4
# Kafka's own default; the test broker sets 0 so tests do not wait
KAFKA_FOR_GROUPS = KAFKA_PROPERTIES.replace(
    "group.initial.rebalance.delay.ms=0", "group.initial.rebalance.delay.ms=3000"
)


def best_drain(rounds: list[Drain]) -> Drain:
    """A system's drains taken together: its fastest and its cheapest. A busy box only ever
    slows a drain and adds CPU time (one drain of the same code moved by a fifth between runs
    of an hour apart), so the best of a few rounds is the system's own figure."""
    return Drain(max(d.rate for d in rounds), min(d.cpu_ms for d in rounds))


async def main(
    requests: int, rates: list[float], seconds: float, headline: bool, drain_rounds: int = 3
) -> None:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retries while topics settle
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-side-"))
    kafka = launch_kafka(workdir / "kafka", KAFKA_FOR_GROUPS)
    redis = start_redis(workdir / "redis")
    cores = os.cpu_count() or 1
    events = requests * EVENTS_PER_REQUEST
    try:
        print(
            f"backlog {requests} requests x {EVENTS_PER_REQUEST} events, {PARTITIONS} "
            f"partitions, {cores} cores; sweep {', '.join(f'{r:g}' for r in rates)} events/s, "
            f"{seconds:g} s each",
            flush=True,
        )
        run = uuid.uuid4().hex[:6]
        src, dst = f"raw-{run}", f"raw-{run}-out"
        await create(kafka.address, [src, dst], PARTITIONS)
        await produce(kafka.address, src, backlog(requests, run))
        span, cpu = await raw_passthrough(kafka.address, src, dst, events)
        floor = Drain(events / span, cpu * 1000 / events)
        results: list[tuple[str, Drain, list[Steady]]] = []
        starts: list[Callable[[], Awaitable[System]]] = [
            partial(faust_system, kafka.address, workdir),
            partial(
                tracejudge_system,
                "tracejudge: 1 worker",
                kafka.address,
                redis.address,
                workdir,
                1,
            ),
            partial(
                tracejudge_system,
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
        drains = {name: [drained] for name, drained, _ in results}
        for n in range(2, drain_rounds + 1):  # the systems take turns again, drains only
            for start in starts:
                system = await start()
                try:
                    drains[system.name].append(await drain(kafka.address, system, requests))
                finally:
                    system.stop()
            print(f"  drain round {n} done", flush=True)
        results = [(name, best_drain(drains[name]), sweep) for name, _, sweep in results]
        for name, rounds in drains.items():
            print(
                f"  drains of {name}: "
                + ", ".join(f"{d.rate:.0f} ev/s {d.cpu_ms:.3f} ms" for d in rounds),
                flush=True,
            )
    finally:
        kafka.stop()
        redis.stop()
    report(floor, results)
    if headline:
        write_headline(floor, results, requests, rates, seconds)


def report(floor: Drain, results: list[tuple[str, Drain, list[Steady]]]) -> None:
    def best(sweep: list[Steady]) -> float:
        return max((s.rate for s in sweep if s.held), default=0.0)

    faust = results[0]
    print(f"\n{'system':<46} {'drain ev/s':>10} {'CPU ms/ev':>9} {'max steady ev/s':>15}")
    floor_name = "raw aiokafka consume + forward (in process)"
    print(f"{floor_name:<46} {floor.rate:>10.0f} {floor.cpu_ms:>9.3f}")
    for name, drained, sweep in results:
        print(
            f"{name:<46} {drained.rate:>10.0f} {drained.cpu_ms:>9.3f} {best(sweep):>15.0f}"
            f"   (drain {drained.rate / faust[1].rate:.2f}x, CPU "
            f"{drained.cpu_ms / faust[1].cpu_ms:.2f}x bare Faust)"
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
    one, many = results[1], results[-1]
    cpu = min(one[1].cpu_ms, many[1].cpu_ms) / faust[1].cpu_ms
    drain_x = many[1].rate / faust[1].rate
    steady_x = best(many[2]) / best(faust[2]) if best(faust[2]) else float("inf")
    print("\nbars against bare Faust, per core:")
    bars = [
        ("CPU per event, all processes", cpu, cpu <= 0.8, "<= 0.8x"),
        (f"drain, {many[0].split(': ')[1]}", drain_x, drain_x >= 2, ">= 2x"),
        (
            f"highest steady rate at p99 <= {P99_LIMIT_MS:g} ms",
            steady_x,
            steady_x >= 1.5,
            ">= 1.5x",
        ),
    ]
    for label, value, met, bar in bars:
        print(f"  {label:<40} {value:5.2f}x   (bar {bar}: {'met' if met else 'missed'})")


HEADLINE_BEGIN = (
    "<!-- side-by-side headline: begin (python -m benchmarks.side_by_side --write-headline) -->"
)
HEADLINE_END = "<!-- side-by-side headline: end -->"


def headline_table(
    floor: Drain,
    results: list[tuple[str, Drain, list[Steady]]],
    requests: int,
    rates: list[float],
    seconds: float,
    commit: str,
) -> str:
    faust = results[0][1]
    lines = [
        f"On {commit}, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores: backlog {requests} "
        f"requests x {EVENTS_PER_REQUEST} events, {PARTITIONS} partitions (each system's "
        "fastest and cheapest of its drains, the systems taking turns); steady rates "
        f"{', '.join(f'{r:g}' for r in rates)} events/s, {seconds:g} s each.",
        "",
        "| system | drain ev/s | CPU ms/event | drain vs bare Faust | CPU vs bare Faust "
        f"| highest steady ev/s at p99 <= {P99_LIMIT_MS:g} ms |",
        "|---|---|---|---|---|---|",
        f"| raw aiokafka consume + forward (in process) | {floor.rate:,.0f} | "
        f"{floor.cpu_ms:.3f} | | | |",
    ]
    for name, drained, sweep in results:
        best = max((st.rate for st in sweep if st.held), default=0.0)
        lines.append(
            f"| {name} | {drained.rate:,.0f} | {drained.cpu_ms:.3f} | "
            f"{drained.rate / faust.rate:.2f}x | {drained.cpu_ms / faust.cpu_ms:.2f}x | "
            f"{best:,.0f} |"
        )
    return "\n".join(lines)


def write_headline(
    floor: Drain,
    results: list[tuple[str, Drain, list[Steady]]],
    requests: int,
    rates: list[float],
    seconds: float,
) -> None:
    at = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    table = headline_table(
        floor, results, requests, rates, seconds, at + (" with changes" if changed else "")
    )
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    head, _, rest = text.partition(HEADLINE_BEGIN)
    _, found, tail = rest.partition(HEADLINE_END)
    if not found:
        raise SystemExit(f"{path.name} has no headline markers")
    path.write_text(f"{head}{HEADLINE_BEGIN}\n{table}\n{HEADLINE_END}{tail}")
    print(f"\nheadline written to {path.name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--rates", default="1000,2000,4000,6000")
    parser.add_argument("--sweep-seconds", type=float, default=20.0)
    parser.add_argument(
        "--drain-rounds",
        type=int,
        default=3,
        help="drains of each system, taking turns; the best of them is reported",
    )
    parser.add_argument(
        "--write-headline", action="store_true", help="write the results into BENCHMARKS.md"
    )
    args = parser.parse_args()
    asyncio.run(
        main(
            args.requests,
            [float(r) for r in args.rates.split(",")],
            args.sweep_seconds,
            args.write_headline,
            args.drain_rounds,
        )
    )
