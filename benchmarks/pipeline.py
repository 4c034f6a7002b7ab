"""Benchmarks on the real broker: changelog growth, verdict latency, replay throughput.

    python -m benchmarks.pipeline [--events PATH]

Starts Kafka and Redis like the tests do (or reuses TRACEJUDGE_KAFKA_BOOTSTRAP /
TRACEJUDGE_REDIS_URL), runs one worker, and prints numbers side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from benchmarks.data import TAU_AIRLINE, require
from tests.integration.harness import (
    WorkerProcess,
    key_value_lines,
    produce,
    wait_counter,
    worker_env,
)
from tests.realservices import start_kafka, start_redis
from tracejudge.models.names import TABLES, changelog_topic


def naive_changelog_bytes(lines: list[bytes]) -> int:
    """Bytes a design that re-writes the whole window value on every event would send."""
    window: dict[str, int] = defaultdict(int)
    total = 0
    for line in lines:
        rid = json.loads(line)["request_id"]
        window[rid] += len(line)
        total += window[rid]
    return total


def latency_probe(bootstrap: str, topic: str) -> tuple[AIOKafkaConsumer, AIOKafkaProducer]:
    """A reader from the end of `topic` and a producer that sends each record at once: the two
    ends of a verdict latency measurement (not started)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="latest"
    )
    return consumer, AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)


async def topic_bytes(bootstrap: str, topic: str) -> tuple[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    partitions = [p["partition"] for p in described["partitions"]]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        count = size = 0
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for r in records:
                    count += 1
                    size += len(r.key or b"") + len(r.value or b"")
        return count, size
    finally:
        await consumer.stop()


async def replay_throughput(worker: WorkerProcess, lines: list[tuple[Any, Any]]) -> float:
    start = time.perf_counter()
    await produce(worker.settings.kafka_bootstrap, worker.topic("events"), lines)
    requests = len({k for k, _ in lines})
    await wait_counter(worker, requests)
    return time.perf_counter() - start


async def verdict_latency(worker: WorkerProcess, lines: list[tuple[Any, Any]]) -> list[float]:
    """Per request: final_response acknowledged by the broker -> evaluation read back."""
    by_rid: dict[bytes, list[bytes]] = defaultdict(list)
    for key, value in lines:
        by_rid[key].append(value)
    consumer, producer = latency_probe(worker.settings.kafka_bootstrap, worker.topic("evaluations"))
    await consumer.start()
    await producer.start()
    latencies: list[float] = []
    try:
        await asyncio.sleep(1.0)  # let the consumer settle at the end of the topic
        for rid, values in by_rid.items():
            events = [json.loads(v) for v in values]
            terminal = next(i for i, e in enumerate(events) if e["type"] == "final_response")
            for value in values[:terminal]:
                await producer.send(worker.topic("events"), key=rid, value=value)
            await producer.flush()
            fut = await producer.send(worker.topic("events"), key=rid, value=values[terminal])
            await fut
            sent = time.perf_counter()
            got = False
            while not got:
                batch = await consumer.getmany(timeout_ms=1000)
                for records in batch.values():
                    got = got or any(r.key == rid for r in records)
            latencies.append((time.perf_counter() - sent) * 1000)
    finally:
        await producer.stop()
        await consumer.stop()
    return latencies


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main(events: Path) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-bench-"))
    kafka = start_kafka(workdir / "kafka")
    redis = start_redis(workdir / "redis")
    raw = key_value_lines(events)
    try:
        # 1. burst replay, then changelog bytes against input bytes
        env = worker_env(kafka.address, redis.address, workdir, "bench", log_level="warning")
        worker = WorkerProcess(env, workdir / "worker.log").start()
        try:
            elapsed = await replay_throughput(worker, raw)
            await asyncio.sleep(3)  # changelog flushes with the next commit
            in_count, in_bytes = await topic_bytes(kafka.address, worker.topic("events"))
            log_bytes = 0
            log_count = 0
            for table in TABLES:
                c, b = await topic_bytes(
                    kafka.address, changelog_topic(worker.settings.app_id, table)
                )
                log_count += c
                log_bytes += b
        finally:
            worker.stop()
        naive = naive_changelog_bytes([v for _, v in raw if v is not None])
        requests = len({k for k, _ in raw})
        print(f"replay: {len(raw)} events, {requests} requests")
        print(
            f"  burst replay to last verdict: {elapsed:.2f} s = "
            f"{len(raw) / elapsed:,.0f} events/s, {requests / elapsed:,.0f} verdicts/s"
        )
        print(f"  input topic:           {in_bytes:>12,} bytes in {in_count:,} records")
        print(
            f"  changelogs (this):     {log_bytes:>12,} bytes in {log_count:,} records "
            f"= {log_bytes / in_bytes:.2f} x input"
        )
        print(
            f"  whole-window rewrite:  {naive:>12,} bytes (computed) "
            f"= {naive / in_bytes:.2f} x input"
        )
        # 2. latency, one request at a time on a fresh worker
        env = worker_env(kafka.address, redis.address, workdir, "lat", log_level="warning")
        worker = WorkerProcess(env, workdir / "worker-latency.log").start()
        try:
            latencies = await verdict_latency(worker, raw)
        finally:
            worker.stop()
        print(
            f"verdict latency, final_response acked -> evaluation read "
            f"({len(latencies)} requests, sequential):"
        )
        print(
            f"  p50 {pct(latencies, 50):.1f} ms  p90 {pct(latencies, 90):.1f} ms  "
            f"p99 {pct(latencies, 99):.1f} ms  max {max(latencies):.1f} ms  "
            f"mean {statistics.mean(latencies):.1f} ms"
        )
    finally:
        redis.stop()
        kafka.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=Path, default=TAU_AIRLINE / "events.jsonl")
    args = parser.parse_args()
    asyncio.run(main(require(args.events, "pass --events tests/data/tau_airline/events.jsonl")))
