"""The worker's cost per event, this tree beside another checkout, default settings: the
side-by-side backlog (`side_by_side.backlog`: a task, four reasoning steps and four tool calls,
a final answer per request) handled by the in-memory worker (`tests/memory.py`: parsing, the
window, the run's state in flight, the close and the verdict; no Kafka, no Redis), each tree in
its own process with its own Python environment, rounds taking turns.

    python -m benchmarks.tree_cost --base TREE [--base-python PY] [--requests 1000] [--rounds 5]

TREE: a checkout of earlier code with its own environment (`scripts/bootstrap.sh` in it: its
`.venv/bin/python`, unless `--base-python` says otherwise). Microseconds per event, the lowest
and the median of the rounds of each: a busy box only adds time, so the lowest are compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# run in each tree's process: its own memory worker on its own code
ROUND = """
import asyncio, json, sys, time
from benchmarks.side_by_side import backlog
from tests.memory import memory_worker

async def main() -> None:
    events = [json.loads(v) for _, v in backlog(int(sys.argv[1]), "tree")]
    w = memory_worker()
    for event in events[:200]:  # warm-up: imports, caches
        await w.event({**event, "request_id": "warm-" + event["request_id"]})
    # the modes agent runs in the worker's process too: where the tree has one, the verdict's
    # mode run is taken once a request's answer closed it, as the modes agent takes it
    modes = getattr(w, "mode_records", None)
    started = time.perf_counter()
    for event in events:
        await w.event(event)
        if modes is not None and event["type"] == "final_response":
            await modes()
    if modes is not None:
        await modes()
    print(json.dumps((time.perf_counter() - started) / len(events) * 1e6))

asyncio.run(main())
"""


def one_round(python: str, tree: Path, requests: int) -> float:
    done = subprocess.run(
        [python, "-c", ROUND, str(requests)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout of earlier code")
    parser.add_argument("--base-python", default="", help="its Python (default: its .venv)")
    parser.add_argument("--requests", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trees = {
        "this tree": (sys.executable, ROOT),
        f"base ({args.base})": (
            args.base_python or str(args.base / ".venv" / "bin" / "python"),
            args.base,
        ),
    }
    took: dict[str, list[float]] = {name: [] for name in trees}
    for n in range(args.rounds):
        for name, (python, tree) in trees.items():
            took[name].append(one_round(python, tree, args.requests))
        print(f"round {n + 1}: " + ", ".join(f"{k} {v[-1]:.1f} µs" for k, v in took.items()))
    print(f"\n{args.requests * 10:,} events a round, {args.rounds} rounds, µs per event:")
    print("| tree | lowest | median |\n|---|---|---|")
    for name, values in took.items():
        print(f"| {name} | {min(values):.1f} | {statistics.median(values):.1f} |")


if __name__ == "__main__":
    main()
