"""How often a worker that is behind commits: the group's committed offsets, polled while one
worker drains a backlog, per table store.

    python -m benchmarks.commits [--requests 4000] [--stores memory,rocksdb]

A crash replays what was not committed, so the longest time without a commit while draining
bounds the work a kill -9 repeats. Prints the drain rate, how many times the
committed offsets moved and the longest gap between two moves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.integration.harness import WorkerProcess, produce, refund_request, worker_env
from tests.realservices import start_kafka

PARTITIONS = 4
POLL_S = 0.2


async def drain(kafka: str, workdir: Path, store: str, requests: int) -> str:
    env = worker_env(
        kafka,
        "",
        workdir,
        f"commits-{store}",
        table_store=store,
        log_level="warning",
        idle_timeout_s=86400,
        idle_check_interval_s=5,
        partitions=PARTITIONS,
        stall_timeout_s=120,
    )
    worker = WorkerProcess(env, workdir / f"commits-{store}.log").start()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka, group_id=worker.settings.app_id, enable_auto_commit=False
    )
    try:
        lines = [
            (f"r{i}".encode(), json.dumps(event).encode())
            for i in range(requests)
            for event in refund_request(f"r{i}")
        ]
        await produce(kafka, worker.topic("events"), lines)
        await consumer.start()
        tps = [TopicPartition(worker.topic("events"), p) for p in range(PARTITIONS)]
        started = last_move = time.monotonic()
        last: list[int | None] = []
        gaps: list[float] = []
        while True:
            offsets = [await consumer.committed(tp) for tp in tps]
            now = time.monotonic()
            if offsets != last:
                gaps.append(now - last_move)
                last, last_move = offsets, now
            if sum(o or 0 for o in offsets) >= len(lines) or now - started > 600:
                break
            await asyncio.sleep(POLL_S)
    finally:
        await consumer.stop()
        worker.stop()
    drained_s = time.monotonic() - started
    moves = gaps[1:]  # the first "move" is the start
    return (
        f"{store:<8} {len(lines):,} events drained in {drained_s:5.1f} s "
        f"({len(lines) / drained_s:,.0f}/s) | commits moved {len(moves)} times | "
        f"gap median {statistics.median(moves or [0]):4.1f} s, max {max(moves or [0]):4.1f} s"
    )


async def main(requests: int, stores: list[str]) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-bench-commits-"))
    kafka = start_kafka(workdir / "kafka")
    try:
        for store in stores:
            print(await drain(kafka.address, workdir, store, requests), flush=True)
    finally:
        kafka.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--stores", default="memory,rocksdb", help="comma-separated")
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.stores.split(",")))
