"""The worker's CPU per event against bare Faust's, in one run: the guard on the per-event path.

    python -m benchmarks.cpu_per_event [--rounds 7] [--requests 4000] [--check | --record]

Starts the real Kafka and Redis, then drains the side-by-side backlog (`side_by_side.backlog`:
10 events a request) `--rounds` times with each system, taking turns on the same broker: the
bare Faust agent that forwards each event, and one tracejudge worker, rules only, every other
setting at its default. CPU milliseconds per input event over all of a system's processes,
from its first output to its last (`side_by_side.drain`). The figure is the ratio of each
system's lowest round: what the box is doing moves both, so the ratio holds across boxes and
hours where the absolute figures do not (the same code measured 0.23 to 0.31 ms an event on
bare Faust), and the lowest, since a busy neighbour only ever adds CPU time (rounds of one
build differed by up to a third, the medians by up to 15 %).

`--check` compares the ratio with the one recorded in `cpu_per_event.json` and exits 1 when it
is more than `TOLERANCE` above it: work added to every event shows here before anyone notices
the bill. `--record` writes the ratio measured, with the commit it ran on, as the new baseline.
The soak command (`scripts/soak.sh`) runs `--check`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.side_by_side import (
    KAFKA_FOR_GROUPS,
    drain,
    faust_system,
    tracejudge_system,
)
from tests.realservices import ROOT, launch_kafka, start_redis

BASELINE = Path(__file__).with_name("cpu_per_event.json")
TOLERANCE = 0.10  # a rise of more than this over the baseline's ratio fails --check


@dataclass(frozen=True)
class Rounds:
    faust: list[float]  # CPU ms per event, one per round
    worker: list[float]

    @property
    def ratio(self) -> float:
        return min(self.worker) / min(self.faust)


async def measure(rounds: int, requests: int) -> Rounds:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-cpu-"))
    kafka = launch_kafka(workdir / "kafka", KAFKA_FOR_GROUPS)
    redis = start_redis(workdir / "redis")
    faust: list[float] = []
    worker: list[float] = []
    try:
        # round 0 is not counted: the broker's JVM compiles its hot paths during the first
        # drains, on the core the worker shares with it, and the first rounds came out up to a
        # third dearer than the later ones
        for n in range(rounds + 1):
            for name, kept in (("bare Faust", faust), ("tracejudge", worker)):
                into = kept if n else []
                if name == "bare Faust":
                    system = await faust_system(kafka.address, workdir)
                else:
                    (workdir / f"r{n}").mkdir()
                    system = await tracejudge_system(
                        "tracejudge", kafka.address, redis.address, workdir / f"r{n}", 1
                    )
                try:
                    into.append((await drain(kafka.address, system, requests)).cpu_ms)
                finally:
                    system.stop()
                label = f"round {n}" if n else "warm-up"
                print(f"  {label}: {name:<10} {into[-1]:.3f} ms/event", flush=True)
    finally:
        kafka.stop()
        redis.stop()
    return Rounds(faust, worker)


def commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=4000)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail on a rise over the baseline")
    mode.add_argument("--record", action="store_true", help="write the baseline")
    args = parser.parse_args()
    print(
        f"{args.rounds} rounds (after a warm-up) of {args.requests} requests x 10 events, bare "
        "Faust and one tracejudge worker taking turns on one broker",
        flush=True,
    )
    result = asyncio.run(measure(args.rounds, args.requests))
    faust, worker = min(result.faust), min(result.worker)
    at = commit()
    print(
        f"\nlowest CPU per event: bare Faust {faust:.3f} ms, tracejudge {worker:.3f} ms: "
        f"{result.ratio:.3f}x bare Faust ({at}); medians {statistics.median(result.faust):.3f}"
        f" and {statistics.median(result.worker):.3f} ms"
    )
    if args.record:
        BASELINE.write_text(
            json.dumps(
                {
                    "ratio": round(result.ratio, 3),
                    "faust_ms": round(faust, 3),
                    "worker_ms": round(worker, 3),
                    "rounds": args.rounds,
                    "requests": args.requests,
                    "commit": at,
                    "date": time.strftime("%Y-%m-%d"),
                },
                indent=1,
            )
            + "\n"
        )
        print(f"baseline written to {BASELINE.relative_to(ROOT)}")
        return 0
    if args.check:
        base = json.loads(BASELINE.read_text())
        limit = base["ratio"] * (1 + TOLERANCE)
        ok = result.ratio <= limit
        print(
            f"baseline {base['ratio']:.3f}x ({base['commit']}, {base['date']}); limit "
            f"{limit:.3f}x: {'ok' if ok else 'FAILED: CPU per event rose'} "
            f"({result.ratio / base['ratio'] - 1:+.1%})"
        )
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
