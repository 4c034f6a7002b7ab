"""What the run nonce costs the worker per event: the side-by-side backlog's events handled by
the in-memory worker (parsing, the window, the loop rules and budgets) with and without a
`run_nonce` on each event, in turn, in one process (no Kafka, no Redis).

    python -m benchmarks.run_nonce_cost [--requests N] [--rounds K]

Microseconds per event: the lowest and the median of K rounds of each, interleaved, so both
see the same machine. The nonce is one more validated field per event (a pattern of 8-64
characters) and 30 bytes on the wire; the worker copies it into what it signs only when it
publishes a control record.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from benchmarks.side_by_side import backlog
from tests.memory import memory_worker


async def drain(events: list[dict[str, object]]) -> float:
    w = memory_worker(control_keys="hmac:bench-1:" + "b" * 64)
    started = time.perf_counter()
    for event in events:
        await w.event(event)
    return (time.perf_counter() - started) / len(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    plain = [json.loads(v) for _, v in backlog(args.requests, "nonce")]
    nonced = [{**e, "run_nonce": f"n{hash(e['request_id']) & 0xFFFFFFFF:016x}"} for e in plain]
    took: dict[str, list[float]] = {"without": [], "with": []}
    asyncio.run(drain(plain[:2_000]))  # warm-up
    for _ in range(args.rounds):
        took["without"].append(asyncio.run(drain(plain)))
        took["with"].append(asyncio.run(drain(nonced)))
    print(f"{len(plain)} events, {args.rounds} rounds each, µs per event")
    print("| events | lowest | median |\n|---|---|---|")
    for name, seconds in took.items():
        print(
            f"| {name} a run_nonce | {min(seconds) * 1e6:.1f} | "
            f"{statistics.median(seconds) * 1e6:.1f} |"
        )


if __name__ == "__main__":
    main()
