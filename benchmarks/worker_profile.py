"""Where a worker's CPU goes per event, stage by stage: py-spy on the side-by-side drain.

    python -m benchmarks.worker_profile [--requests 6000] [--faust] [--out build/profile]

Starts the real Kafka and Redis, puts the side-by-side backlog (`side_by_side.backlog`: 10
events a request) on a fresh topic, starts one tracejudge worker (rules only, every other
setting at its default) and, from its first output to its last, samples its threads with py-spy
(100 Hz, the process never paused). Each sample is charged to the first stage (`STAGES`) a frame
of its stack belongs to; the table gives microseconds of sampled CPU per input event and the
share. `--faust`: the bare Faust agent that forwards each event is sampled the same way first,
for its total (a rough one: it drains on a fresh broker whose JVM is still warming, 339 to 443
µs an event on the same box; `benchmarks.cpu_per_event` takes turns for a fair ratio). The raw
samples are kept under `--out` (py-spy's collapsed stacks, one file per
system) for a closer look, e.g. at one stage's callers. Sampled CPU runs close to the process's
own figure (`side_by_side`'s CPU per event); both move with the box, the shares much less.

py-spy comes with the dev extra; run the same command at an older commit for a comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

from benchmarks.side_by_side import (
    EVENTS_PER_REQUEST,
    KAFKA_FOR_GROUPS,
    System,
    backlog,
    faust_system,
    first_record,
    outputs_after,
    tracejudge_system,
)
from tests.integration.harness import produce
from tests.realservices import ROOT, launch_kafka, start_redis

RATE_HZ = 100
# (stage, what a frame of it contains): the first stage any frame of a sample matches takes it
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("debug log records", ("Logger.debug", "Logger._log", "Logger.makeRecord", "Spinner")),
    (
        "Redis writes: evaluation, timeline, kept verdict",
        ("RedisSink", "RedisAgreementStore", "PipelineBatch", "redis/"),
    ),
    ("verdict: rules, conclude, mask, encode (per request)", ("make_verdict",)),
    ("close: read the window, learn the baseline (per request)", ("WindowCloser.close",)),
    ("loop rules and budgets on each step", ("Intervener.observe",)),
    ("early-stop checks", ("EarlyStopper.check",)),
    ("event: parse and validate", ("parse_event", "EventHandler._parse")),
    ("event: window store", ("WindowStore.add", "WindowStore.held")),
    ("event: handler, metrics", ("EventHandler",)),
    ("publish the evaluation, verdict metrics", ("VerdictPublisher",)),
    ("commit rule, offset guard, acknowledgements", ("CommitRule", "OffsetGuard", "Held.")),
    ("Faust and aiokafka: consume, produce, commit, tables", ("",)),
]


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy not found: install the dev extra (scripts/bootstrap.sh dev)")
    return found


def stages(samples: Path) -> tuple[Counter[str], int]:
    counts: Counter[str] = Counter()
    total = 0
    for line in samples.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        frames = stack.split(";")
        for name, parts in STAGES:
            if any(part in frame for frame in frames for part in parts):
                counts[name] += int(n)
                break
    return counts, total


async def sampled(kafka: str, system: System, requests: int, out: Path) -> None:
    lines = backlog(requests, f"profile-{uuid.uuid4().hex[:6]}")
    keys = {key for key, _ in lines[EVENTS_PER_REQUEST - 1 :: EVENTS_PER_REQUEST]}
    await produce(kafka, system.source, lines)
    system.start()
    try:
        await first_record(kafka, system.sink, 180)
        command = [py_spy(), "record", "--pid", str(system.processes[0].pid)]
        command += ["--format", "raw", "--rate", str(RATE_HZ), "--nonblocking", "-o", str(out)]
        spy = subprocess.Popen(  # noqa: ASYNC220 (started once, before the span it samples)
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        found = await outputs_after(kafka, system, keys, 900)
        spy.send_signal(signal.SIGINT)
        await asyncio.to_thread(spy.wait, 60)
        if len(found) < len(keys):
            raise TimeoutError(f"{system.name}: {len(found)} of {len(keys)} requests answered")
    finally:
        system.stop()


async def main(requests: int, faust: bool, out: Path) -> None:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-profile-"))
    kafka = launch_kafka(workdir / "kafka", KAFKA_FOR_GROUPS)
    redis = start_redis(workdir / "redis")
    events = requests * EVENTS_PER_REQUEST
    try:
        if faust:
            await sampled(
                kafka.address,
                await faust_system(kafka.address, workdir),
                requests,
                out / "faust.txt",
            )
        system = await tracejudge_system("worker", kafka.address, redis.address, workdir, 1)
        await sampled(kafka.address, system, requests, out / "worker.txt")
    finally:
        kafka.stop()
        redis.stop()
    per_event = 1e6 / RATE_HZ / events
    counts, total = stages(out / "worker.txt")
    print(
        f"\n{requests} requests x {EVENTS_PER_REQUEST} events; one worker, sampled at "
        f"{RATE_HZ} Hz from its first output to its last (raw samples: {out})\n"
    )
    print(f"{'stage':<58} {'us/event':>9} {'share':>6}")
    for name, _ in STAGES:
        print(f"{name:<58} {counts[name] * per_event:>9.1f} {counts[name] / total:>6.0%}")
    print(f"{'all sampled CPU':<58} {total * per_event:>9.1f}")
    if faust:
        _, faust_total = stages(out / "faust.txt")
        print(f"{'bare Faust, forward each: all sampled CPU':<58} {faust_total * per_event:>9.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--faust", action="store_true", help="sample bare Faust first")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "profile")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(args.requests, args.faust, args.out))
