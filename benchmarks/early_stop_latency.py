"""Iteration event produced -> early_stop decision readable in Redis, on the real broker.

    python -m benchmarks.early_stop_latency [--requests N]

Per request: task_started and round 1 are sent first; then round 2 (with a <Conclusion>) is
sent, and the clock runs from the broker's acknowledgement of it until a GET of
tracejudge:control:{request_id} returns the decision (polled every millisecond).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer

from benchmarks.pipeline import pct
from tests.integration.harness import WorkerProcess, worker_env
from tests.realservices import start_kafka, start_redis


async def main(requests: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-bench-early-"))
    kafka = start_kafka(workdir / "kafka")
    redis_service = start_redis(workdir / "redis")
    env = worker_env(kafka.address, redis_service.address, workdir, "early", log_level="warning")
    worker = WorkerProcess(env, workdir / "worker.log").start()
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, acks="all", linger_ms=0)
    redis = aioredis.from_url(redis_service.address)
    await producer.start()
    topic = worker.topic("events")
    latencies: list[float] = []
    try:
        for n in range(requests):
            rid = f"early-{uuid.uuid4().hex[:8]}-{n}"
            key = rid.encode()
            first = [
                {"type": "task_started", "request_id": rid, "goal": "find the cause"},
                {
                    "type": "iteration",
                    "request_id": rid,
                    "step_index": 1,
                    "iteration": 1,
                    "max_iterations": 5,
                    "response": "<Hypothesis>cold cache</Hypothesis>",
                },
            ]
            for event in first:
                await producer.send(topic, key=key, value=json.dumps(event).encode())
            await producer.flush()
            second = {
                "type": "iteration",
                "request_id": rid,
                "step_index": 2,
                "iteration": 2,
                "max_iterations": 5,
                "response": "<Conclusion>The cache was cold.</Conclusion>",
            }
            fut = await producer.send(topic, key=key, value=json.dumps(second).encode())
            await fut
            sent = time.perf_counter()
            deadline = sent + 30
            while await redis.get(f"tracejudge:control:{rid}") is None:
                if time.perf_counter() > deadline:
                    raise TimeoutError(worker.tail())
                await asyncio.sleep(0.001)
            latencies.append((time.perf_counter() - sent) * 1000)
    finally:
        await producer.stop()
        await redis.aclose()
        worker.stop()
        redis_service.stop()
        kafka.stop()
    print(
        f"early stop: iteration produced (acked) -> decision in Redis, {len(latencies)} "
        "requests, sequential:"
    )
    print(
        f"  p50 {pct(latencies, 50):.1f} ms  p90 {pct(latencies, 90):.1f} ms  "
        f"p99 {pct(latencies, 99):.1f} ms  max {max(latencies):.1f} ms  "
        f"mean {statistics.mean(latencies):.1f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    asyncio.run(main(parser.parse_args().requests))
