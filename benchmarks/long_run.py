"""What one very long request costs the worker with a team's checks on, side by side with the
same worker without checks, in one run; and how soon the request after it is judged.

    python -m benchmarks.long_run [--steps 12000] [--rounds 2] [--timeout 600]

Starts the real Kafka and Redis, then, `--rounds` times, each system in turn (a fresh worker
process on fresh topics of ONE partition, so every request of the benchmark is on the same
partition; the partition each final event landed on is checked):
- **without checks**: the worker as configured by default;
- **with the shipped example checks**, for every agent: `examples/checks/airline.toml`
  (`TRACEJUDGE_CHECKS_FILE`, its `[default]` table: needs_confirmation and call_before per
  step, the code check `at_most_five_passengers` at close) and `TRACEJUDGE_CHECKS` =
  `examples.checks.coding:no_edits_outside_the_repository` (a per-step code check) and
  `examples.checks.coding:ran_before_submit` (at close). Code checks run in the worker's check
  processes, children of the worker: their CPU is counted with the worker's.
Both workers get the repository on PYTHONPATH and the production stall and idle-check settings.

Each worker first judges a small warm-up request (its check processes start then, not in the
measurement). Then:
1. **after the verdict**: the long request (task_started, `--steps` tool calls over bash, edit,
   get_reservation_details and search, every call different, one in 25 failing, then
   final_response) goes to the events topic at once; CPU seconds of the worker process and its
   descendants (`side_by_side.cpu_s`) from just before the first event is produced to the
   moment its evaluation is read back, and the time from its final event handed to the
   producer to its evaluation read ("long request judged after"). As soon as that evaluation is
   read, a small ordinary request (task, two tool calls, final answer) is produced: the time
   from its final event handed to the producer to its evaluation read is "next request, after
   the verdict".
2. **right behind**: another long request and, without waiting, another small request right
   after its final event; the small one's time from its final event handed to the producer to
   its evaluation read is "next request, right behind": it waits for the long request's events
   to be worked through, as a request behind a long run on its partition does: the worker's
   throughput, with a burst of a whole run at once.
3. **paced**: another long request produced at `--pace` events a second (1,000 by default:
   faster than any agent calls tools, slower than the worker reads them), then the small
   request right after its final event: "next request, paced" is its final event to its
   evaluation. The long run is worked through as it arrives, so this is what its close and
   its checks at close cost the request after it: the bar of one second.
No event of the long request sets a check off (no guarded airline tool, no edit outside the
repository, no submit, every call new so no loop rule fires either), so the checks keep working
to its end; the evaluations' check reasons are printed to show it. Every wait is bounded. The
last lines are a table for BENCHMARKS.md, with the command and the commit it ran on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from benchmarks.side_by_side import System, cpu_s, tracejudge_system
from tests.realservices import KAFKA_PROPERTIES, ROOT, launch_kafka, start_redis

CHECKS_FILE = ROOT / "examples" / "checks" / "airline.toml"
CODE_CHECKS = (
    "examples.checks.coding:no_edits_outside_the_repository,"
    "examples.checks.coding:ran_before_submit"
)
# both workers: every request on one partition; the production stall and idle-check settings
# (the integration harness shortens them for tests); the repository importable for the checks
COMMON = {
    "TRACEJUDGE_PARTITIONS": "1",
    "TRACEJUDGE_STALL_TIMEOUT_S": "120",
    "TRACEJUDGE_IDLE_CHECK_INTERVAL_S": "5",
    "PYTHONPATH": str(ROOT),
}
PLAIN, CHECKED = "without checks", "with the shipped example checks"
SYSTEMS: dict[str, dict[str, str]] = {
    PLAIN: COMMON,
    CHECKED: {
        **COMMON,
        "TRACEJUDGE_CHECKS_FILE": str(CHECKS_FILE),
        "TRACEJUDGE_CHECKS": CODE_CHECKS,
    },
}
TOOLS = ("bash", "edit", "get_reservation_details", "search")
CPU_BAR = 3.0  # with checks at most this many times the CPU without
LATENCY_BAR_S = 1.0  # the next request judged within this of its final event
START_TIMEOUT_S = 180.0
SMALL_TIMEOUT_S = 120.0


def tool_call(rid: str, i: int) -> dict[str, Any]:
    """Step `i` of the long request: small, each call and result its own (no loop rule fires),
    nothing a shipped check fails on (no guarded airline tool, no edit outside the repository)."""
    tool = TOOLS[i % len(TOOLS)]
    if tool == "bash":
        args, result = f"ls -la src/pkg{i}", f"total {8 + i % 90}\n-rw-r--r-- 1 dev dev {i} m.py"
    elif tool == "edit":
        args = json.dumps({"path": f"src/module_{i}.py", "line": i})
        result = f"edited src/module_{i}.py: 1 line changed"
    elif tool == "get_reservation_details":
        args = json.dumps({"reservation_id": f"R{i:06d}"})
        result = json.dumps({"reservation_id": f"R{i:06d}", "passengers": 2, "status": "ok"})
    else:
        args, result = json.dumps({"n": i}), f"{i % 7} results for query {i}"
    event: dict[str, Any] = {
        "type": "tool_call",
        "request_id": rid,
        "step_index": i,
        "tool": tool,
        "args_summary": args,
        "latency_ms": 5 + i % 40,
    }
    if i % 25 == 0:
        event.update(success=False, error=f"timed out after {1000 + i} ms")
    else:
        event.update(success=True, result_preview=result)
    return event


def long_request(rid: str, steps: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "task_started",
            "request_id": rid,
            "agent_name": "long-runner",
            "goal": "tidy the reservation tooling's modules and check each reservation",
        },
        *(tool_call(rid, i) for i in range(1, steps + 1)),
        {
            "type": "final_response",
            "request_id": rid,
            "step_index": steps + 1,
            "output": f"Tidied {steps // 4} modules and checked {steps // 4} reservations.",
        },
    ]


def small_request(rid: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "task_started",
            "request_id": rid,
            "agent_name": "long-runner",
            "goal": "look up reservation R000042 and say how many passengers it has",
        },
        tool_call(rid, 2),  # get_reservation_details
        tool_call(rid, 3),  # search
        {
            "type": "final_response",
            "request_id": rid,
            "step_index": 4,
            "output": "Reservation R000042 has 2 passengers.",
        },
    ]


@dataclass
class Verdicts:
    """Reads a worker's evaluations topic from its start for as long as the system runs, and
    notes when each request's first evaluation was read (wall clock)."""

    kafka: str
    topic: str
    seen: dict[str, tuple[float, dict[str, Any]]] = field(default_factory=dict)
    _consumer: Any = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._consumer = AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.kafka, group_id=None, auto_offset_reset="earliest"
        )
        await self._consumer.start()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            batch = await self._consumer.getmany(timeout_ms=200)
            now = time.time()
            for records in batch.values():
                for r in records:
                    if r.key is None or r.value is None:
                        continue
                    rid = r.key.decode()
                    if rid not in self.seen:
                        self.seen[rid] = (now, json.loads(r.value))

    async def wait(self, rid: str, timeout_s: float) -> tuple[float, dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while rid not in self.seen:
            if self._task is not None and self._task.done():
                self._task.result()  # the reader failed: say why
                raise RuntimeError("the evaluations reader stopped")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no evaluation of {rid} on {self.topic} in {timeout_s:g} s")
            await asyncio.sleep(0.005)
        return self.seen[rid]

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()


@dataclass
class Sent:
    """A request's events, handed to the producer: when its final event was (wall clock), and
    the broker's acknowledgement of it."""

    rid: str
    handed: float
    final: asyncio.Future[Any]

    async def partition(self, timeout_s: float = 120.0) -> int:
        meta = await asyncio.wait_for(asyncio.shield(self.final), timeout_s)
        return int(meta.partition)


async def enqueue(
    producer: Any, topic: str, events: list[dict[str, Any]]
) -> tuple[Sent, list[Any]]:
    """Hands all of a request's events to the producer without waiting for the broker."""
    records = [(e["request_id"].encode(), json.dumps(e).encode()) for e in events]
    futures = [await producer.send(topic, value, key=key) for key, value in records[:-1]]
    key, value = records[-1]
    handed = time.time()
    futures.append(await producer.send(topic, value, key=key))
    return Sent(key.decode(), handed, futures[-1]), futures


async def enqueue_paced(
    producer: Any, topic: str, events: list[dict[str, Any]], rate: float
) -> tuple[Sent, list[Any]]:
    """`enqueue` at `rate` events a second, in slices every 50 ms."""
    futures: list[Any] = []
    chunk = max(1, int(rate / 20))
    started = time.monotonic()
    for at in range(0, len(events) - 1, chunk):
        for e in events[at : min(at + chunk, len(events) - 1)]:
            futures.append(
                await producer.send(topic, json.dumps(e).encode(), key=e["request_id"].encode())
            )
        await asyncio.sleep(max(0.0, started + (at + chunk) / rate - time.monotonic()))
    last = events[-1]
    handed = time.time()
    final = await producer.send(topic, json.dumps(last).encode(), key=last["request_id"].encode())
    futures.append(final)
    return Sent(last["request_id"], handed, final), futures


async def delivered(futures: list[Any], timeout_s: float) -> None:
    await asyncio.wait_for(asyncio.gather(*futures), timeout_s)


@dataclass
class Round:
    system: str
    cpu_s: float  # the long request, after-the-verdict pass: worker and its descendants
    worker_cpu_s: float  # the same, the worker process alone (the rest: check processes)
    long_s: float  # its final event handed to the producer -> its evaluation read
    next_s: float  # the small request produced once that evaluation was read
    behind_long_s: float  # the second long request, right-behind pass
    behind_next_s: float  # the small request produced right behind it
    behind_cpu_s: float  # both requests of the right-behind pass
    paced_next_s: float  # the small request produced right after a long one sent at a pace
    idle_cpu_s: float  # the worker's CPU over 2 idle seconds before the pass (noise floor)
    notes: list[str]


def checks_said(evaluation: dict[str, Any]) -> str:
    """What the evaluation says about checks (a finding, or a check left out)."""
    said = [r for r in evaluation.get("reasons", []) if "check" in str(r).lower()]
    return (
        f"{evaluation.get('step_count')} steps, passed={evaluation.get('passed')}, "
        f"check reasons: {said or 'none'}"
    )


async def one_round(
    kafka: str, redis: str, workdir: Path, name: str, steps: int, timeout_s: float, pace: float
) -> Round:
    system: System = await tracejudge_system(name, kafka, redis, workdir, 1, SYSTEMS[name])
    verdicts = Verdicts(kafka, system.sink)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka, acks="all", linger_ms=5, max_batch_size=1 << 20
    )
    tag = uuid.uuid4().hex[:8]
    notes: list[str] = []
    try:
        await verdicts.start()
        await producer.start()
        system.start()
        await asyncio.to_thread(system.workers[0].wait_healthy, START_TIMEOUT_S)
        # warm-up: the check processes start, the caches fill; not measured
        warm, futures = await enqueue(producer, system.source, small_request(f"warm-{tag}"))
        await delivered(futures, SMALL_TIMEOUT_S)
        await verdicts.wait(warm.rid, START_TIMEOUT_S)
        idle = system.cpu()
        await asyncio.sleep(2.0)
        idle = system.cpu() - idle

        # 1. after the verdict
        before, alone = system.cpu(), worker_cpu(system)
        long, futures = await enqueue(producer, system.source, long_request(f"long-{tag}", steps))
        await delivered(futures, timeout_s)
        long_partition = await long.partition()
        long_seen, evaluation = await verdicts.wait(long.rid, timeout_s)
        cpu, alone = system.cpu() - before, worker_cpu(system) - alone
        notes.append(f"long request: {checks_said(evaluation)}")
        nxt, futures = await enqueue(producer, system.source, small_request(f"next-{tag}"))
        await delivered(futures, SMALL_TIMEOUT_S)
        next_partition = await nxt.partition()
        next_seen, _ = await verdicts.wait(nxt.rid, SMALL_TIMEOUT_S)

        # 2. right behind
        before = system.cpu()
        long2, futures = await enqueue(producer, system.source, long_request(f"long2-{tag}", steps))
        behind, more = await enqueue(producer, system.source, small_request(f"behind-{tag}"))
        await delivered(futures + more, timeout_s)
        long2_partition = await long2.partition()
        behind_partition = await behind.partition()
        long2_seen, _ = await verdicts.wait(long2.rid, timeout_s)
        behind_seen, _ = await verdicts.wait(behind.rid, timeout_s)
        behind_cpu = system.cpu() - before

        # 3. paced
        long3, futures = await enqueue_paced(
            producer, system.source, long_request(f"long3-{tag}", steps), pace
        )
        paced, more = await enqueue(producer, system.source, small_request(f"paced-{tag}"))
        await delivered(futures + more, timeout_s)
        paced_seen, _ = await verdicts.wait(paced.rid, timeout_s)
        await verdicts.wait(long3.rid, timeout_s)

        partitions = {long_partition, next_partition, long2_partition, behind_partition}
        partitions |= {await long3.partition(), await paced.partition()}
        if len(partitions) != 1:
            raise AssertionError(f"the requests landed on different partitions: {partitions}")
        if long2_seen > behind_seen:
            notes.append("the request right behind was judged before the long one")
        return Round(
            name,
            cpu,
            alone,
            long_seen - long.handed,
            next_seen - nxt.handed,
            long2_seen - long2.handed,
            behind_seen - behind.handed,
            behind_cpu,
            paced_seen - paced.handed,
            idle,
            notes,
        )
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
        await verdicts.stop()
        system.stop()
        for worker in system.workers:
            notes += log_problems(worker.log)


def worker_cpu(system: System) -> float:
    """CPU seconds of the worker processes alone, without their check processes."""
    return sum(cpu_s(p.pid, descendants=False) for p in system.processes)


def log_problems(log: Path, limit: int = 6) -> list[str]:
    """The worker log's warnings, errors and tracebacks: lines alike but for their times and
    numbers once, with how many there were."""
    if not log.exists():
        return [f"{log}: no log"]
    found: dict[str, tuple[str, int]] = {}
    for line in log.read_text(errors="replace").splitlines():
        if any(w in line.upper() for w in ("WARNING", "ERROR", "TRACEBACK", "CRITICAL")):
            text = re.sub(r"^\S+ \S+ |^\[[^]]*\] \[\d+\] ", "", line.strip())[:160]
            kind = re.sub(r"\d+", "N", text)
            first, count = found.get(kind, (text, 0))
            found[kind] = (first, count + 1)
    shown = [f"{log.name}: {first} (x{count})" for first, count in list(found.values())[:limit]]
    if len(found) > limit:
        shown.append(f"{log.name}: ... {len(found) - limit} more kinds of lines")
    return shown


async def measure(steps: int, rounds: int, timeout_s: float, pace: float) -> list[Round]:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retries while topics settle
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-long-run-"))
    kafka = launch_kafka(workdir / "kafka", KAFKA_PROPERTIES)
    try:
        redis = start_redis(workdir / "redis")
    except BaseException:
        kafka.stop()
        raise
    found: list[Round] = []
    try:
        for n in range(1, rounds + 1):
            for i, name in enumerate(SYSTEMS):
                here = workdir / f"r{n}-{i}"
                here.mkdir()
                r = await one_round(
                    kafka.address, redis.address, here, name, steps, timeout_s, pace
                )
                found.append(r)
                print(
                    f"  round {n}, {name}: long request {r.cpu_s:.2f} CPU s (worker process "
                    f"{r.worker_cpu_s:.2f}), judged "
                    f"{r.long_s:.2f} s after its final event; next request after the verdict "
                    f"{1000 * r.next_s:.0f} ms; right behind: long {r.behind_long_s:.2f} s, "
                    f"next {r.behind_next_s:.2f} s ({r.behind_cpu_s:.2f} CPU s); paced: next "
                    f"{1000 * r.paced_next_s:.0f} ms; idle "
                    f"{r.idle_cpu_s / 2:.3f} CPU s/s",
                    flush=True,
                )
                for note in r.notes:
                    print(f"    {note}", flush=True)
    finally:
        kafka.stop()
        redis.stop()
    return found


def commit() -> str:
    at = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return at + (" with changes" if changed else "")


def report(found: list[Round], steps: int, rounds: int, command: str, pace: float) -> None:
    by = {name: [r for r in found if r.system == name] for name in SYSTEMS}
    plain = min(r.cpu_s for r in by[PLAIN])
    lines = [
        f"On {commit()}, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, one partition, "
        f"{rounds} rounds of each system (a fresh worker each): `{command}`. One request of "
        f"{steps:,} tool calls; CPU of the worker and its check processes from its first "
        "event produced to its evaluation read; times from a final event handed to the producer "
        "(acks=all) to its evaluation read by a consumer (worst round).",
        "",
        "| worker | long request CPU s, lowest | median | of the lowest, check processes "
        "| vs without checks (lowest) | long request judged after "
        "| next request, produced after that verdict "
        "| next request, produced right behind the long one "
        "| next request, right behind a long one sent at a pace |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rs in by.items():
        cpus = [r.cpu_s for r in rs]
        low = min(rs, key=lambda r: r.cpu_s)
        lines.append(
            f"| {name} | {low.cpu_s:.2f} | {statistics.median(cpus):.2f} | "
            f"{low.cpu_s - low.worker_cpu_s:.2f} | {low.cpu_s / plain:.2f}x | "
            f"{max(r.long_s for r in rs):.2f} s | "
            f"{1000 * max(r.next_s for r in rs):.0f} ms | "
            f"{max(r.behind_next_s for r in rs):.2f} s | "
            f"{1000 * max(r.paced_next_s for r in rs):.0f} ms |"
        )
    print("\n" + "\n".join(lines))
    ratio = min(r.cpu_s for r in by[CHECKED]) / plain
    after = max(r.next_s for r in by[CHECKED])
    behind = max(r.behind_next_s for r in by[CHECKED])
    paced = max(r.paced_next_s for r in by[CHECKED])

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    print(
        f"\nwith checks: CPU {ratio:.2f}x without (bar <= {CPU_BAR:g}x): "
        f"{verdict(ratio <= CPU_BAR)}"
        f"\nnext request produced after the long one's verdict: {1000 * after:.0f} ms "
        f"(bar <= {LATENCY_BAR_S:g} s): {verdict(after <= LATENCY_BAR_S)}"
        f"\nnext request produced right behind the long one (waits for its events): "
        f"{behind:.2f} s (the worker's throughput on a burst; no bar)"
        f"\nnext request right behind a long one sent at {pace:g} events/s: "
        f"{1000 * paced:.0f} ms (bar <= {LATENCY_BAR_S:g} s): {verdict(paced <= LATENCY_BAR_S)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12000, help="tool calls of the long request")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each system")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds a long request may take"
    )
    parser.add_argument(
        "--pace", type=float, default=1000.0, help="events a second of the paced long request"
    )
    args = parser.parse_args()
    if args.steps + 2 > 20_000:
        print(
            "note: past TRACEJUDGE_MAX_EVENTS_PER_REQUEST (20,000) events are counted, not checked",
            flush=True,
        )
    command = f"python -m benchmarks.long_run --steps {args.steps} --rounds {args.rounds}"
    print(f"{command}: {args.rounds} rounds of each system, one broker", flush=True)
    found = asyncio.run(measure(args.steps, args.rounds, args.timeout, args.pace))
    report(found, args.steps, args.rounds, command, args.pace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
