"""Time to healthy after a restart, with history behind the worker.

    python -m benchmarks.restart [--requests 10000] [--open 100000] [--stores rocksdb,memory]

Starts Kafka like the tests do, runs one worker, sends `--requests` complete requests (task,
two tool calls, final response) and, in a second scenario, `--open` requests that stay open
(one task_started each), stops the worker with SIGTERM and starts it again on the same data
directory: prints the seconds until /health says ok and the changelog records behind it. Each
scenario runs once per table store, side by side: with RocksDB a restart reads only the
changelogs' tail; in memory it replays them whole (the bar: at most 30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from benchmarks.pipeline import topic_bytes
from tests.integration.harness import (
    WorkerProcess,
    produce,
    refund_request,
    wait_counter,
    worker_env,
)
from tests.realservices import start_kafka
from tracejudge.models.names import TABLES, changelog_topic


def complete_request(rid: str) -> list[tuple[bytes, bytes]]:
    return [(rid.encode(), json.dumps(e).encode()) for e in refund_request(rid)]


def open_request(rid: str) -> list[tuple[bytes, bytes]]:
    event = {"type": "task_started", "request_id": rid, "goal": "still working on it"}
    return [(rid.encode(), json.dumps(event).encode())]


async def scenario(
    kafka: str, workdir: Path, name: str, store: str, requests: int, open_: int
) -> str:
    env = worker_env(
        kafka,
        "",
        workdir,
        name,
        table_store=store,
        log_level="warning",
        idle_timeout_s=86400,
        partitions=4,
        stall_timeout_s=120,  # the defaults: the harness shortens them for tests
        idle_check_interval_s=5,
    )
    worker = WorkerProcess(env, workdir / f"{name}.log").start()
    try:
        lines = [m for i in range(requests) for m in complete_request(f"{name}-c{i}")]
        lines += [m for i in range(open_) for m in open_request(f"{name}-o{i}")]
        started = time.monotonic()
        for i in range(0, len(lines), 5000):
            await produce(kafka, worker.topic("events"), lines[i : i + 5000])
        await wait_counter(worker, len(lines), "events_added", timeout_s=1800)
        fed_s = time.monotonic() - started
        await asyncio.sleep(5)  # a commit, and the changelogs flushed
        worker.stop()
        records = 0
        for table in TABLES:
            count, _ = await topic_bytes(kafka, changelog_topic(worker.settings.app_id, table))
            records += count
        restart = time.monotonic()
        worker.start(timeout_s=1800)
        healthy_s = time.monotonic() - restart
    finally:
        worker.stop()
    return (
        f"{store:<8} {name:<13} {requests:>7,} complete {open_:>8,} open | fed in {fed_s:6.1f} s | "
        f"changelog records {records:>9,} | healthy after restart in {healthy_s:6.1f} s"
    )


async def main(requests: int, open_: int, stores: list[str]) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-bench-restart-"))
    kafka = start_kafka(workdir / "kafka")
    lines = []
    try:
        for name, complete, still_open in (("history", requests, 0), ("open-windows", 0, open_)):
            for store in stores:
                line = await scenario(kafka.address, workdir, name, store, complete, still_open)
                print(line, flush=True)
                lines.append(line)
    finally:
        kafka.stop()
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--open", type=int, default=100_000)
    parser.add_argument("--stores", default="rocksdb,memory", help="comma-separated")
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.open, args.stores.split(",")))
