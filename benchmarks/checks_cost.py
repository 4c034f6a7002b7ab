"""What a team's checks cost the worker per event, side by side in one run.

    python -m benchmarks.checks_cost [--base TREE ...] [--rounds 5] [--requests 3000]

Starts the real Kafka and Redis, then drains the side-by-side backlog (`side_by_side.backlog`:
task, 4 x (reasoning step, tool call), final; 10 events a request) with each system in turn,
`--rounds` times after a warm-up round, all on the same broker:
- bare Faust forwarding each event (the yardstick every ratio is taken against);
- the worker of each `--base`, a checkout of earlier code (run from that tree, with this tree's
  Python environment; the tree needs `pkg/tracejudge`, links to its package folders);
- this worker with no checks configured (the default);
- this worker with the shipped airline checks on (`examples/checks/airline.toml`, in its
  `[default]` table, so for every agent): five per-step checks run on the run so far at every
  step, and a code check on each closed run.
CPU milliseconds per input event over the system's processes, from its first output to its last
(`side_by_side.drain`); each system's lowest round and median, and its lowest against bare
Faust's lowest. A busy box only adds CPU time, so the lowest rounds are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.side_by_side import KAFKA_FOR_GROUPS, drain, faust_system, tracejudge_system
from tests.realservices import ROOT, launch_kafka, start_redis

CHECKS = ROOT / "examples" / "checks" / "airline.toml"


def systems(bases: list[Path]) -> list[tuple[str, dict[str, str] | None]]:
    """(name, worker environment); None: bare Faust."""
    found: list[tuple[str, dict[str, str] | None]] = [("bare Faust", None)]
    for base in bases:
        # the base tree first on the path: its tracejudge package (pkg/tracejudge, links to its
        # folders) and its own tests and examples
        path = os.pathsep.join([str(base / "pkg"), str(base)])
        found.append((f"worker at {base.name}", {"PYTHONPATH": path}))
    found.append(("worker, no checks", {}))
    found.append(
        (
            "worker, airline checks",
            {"TRACEJUDGE_CHECKS_FILE": str(CHECKS), "PYTHONPATH": str(ROOT)},
        )
    )
    return found


async def measure(rounds: int, requests: int, bases: list[Path]) -> dict[str, list[float]]:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-checks-cost-"))
    kafka = launch_kafka(workdir / "kafka", KAFKA_FOR_GROUPS)
    redis = start_redis(workdir / "redis")
    found: dict[str, list[float]] = {name: [] for name, _ in systems(bases)}
    try:
        for n in range(rounds + 1):  # round 0 warms the broker's JVM up: not counted
            for i, (name, env) in enumerate(systems(bases)):
                if env is None:
                    system = await faust_system(kafka.address, workdir)
                else:
                    here = workdir / f"r{n}-{i}"
                    here.mkdir()
                    system = await tracejudge_system(
                        name, kafka.address, redis.address, here, 1, env
                    )
                try:
                    cpu = (await drain(kafka.address, system, requests)).cpu_ms
                finally:
                    system.stop()
                if n:
                    found[name].append(cpu)
                label = f"round {n}" if n else "warm-up"
                print(f"  {label}: {name:<28} {cpu:.3f} ms/event", flush=True)
    finally:
        kafka.stop()
        redis.stop()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--base", type=Path, action="append", default=[], help="a checkout of earlier code"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    bases = [b.resolve() for b in args.base]
    for base in bases:
        if not (base / "pkg" / "tracejudge").is_dir():
            parser.error(
                f"{base}/pkg/tracejudge is missing: link the tree's models, judges, streams, "
                "prompts and client folders there (and entry/__main__.py as __main__.py)"
            )
    print(
        f"{args.rounds} rounds (after a warm-up) of {args.requests} requests x 10 events, each "
        "system in turn on one broker",
        flush=True,
    )
    found = asyncio.run(measure(args.rounds, args.requests, bases))
    faust = min(found["bare Faust"])
    print(f"\n{'system':<30} {'lowest':>8} {'median':>8}  vs bare Faust (lowest)")
    for name, cpu in found.items():
        print(
            f"{name:<30} {min(cpu):>8.3f} {statistics.median(cpu):>8.3f}  {min(cpu) / faust:.3f}x"
        )
    plain, checked = min(found["worker, no checks"]), min(found["worker, airline checks"])
    print(f"\nthe airline checks add {1000 * (checked - plain):+.1f} µs an event (lowest rounds)")
    for base in bases:
        then = min(found[f"worker at {base.name}"])
        print(f"no checks against {base.name}: {1000 * (plain - then):+.1f} µs an event")
    return 0


if __name__ == "__main__":
    sys.exit(main())
