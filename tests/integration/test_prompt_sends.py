"""What an agent waits on does not wait out the worker producer's linger."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.integration.harness import (
    WorkerProcess,
    grouped,
    produce,
    produce_events,
    worker_env,
)
from tests.integration.test_early_stop_pipeline import CONCLUSION, rounds
from tests.integration.test_retries import response
from tracejudge.models.names import REDIS_CONTROL_KEY
from tracejudge.streams.kafka.internals import send_lingering

pytestmark = pytest.mark.integration

# far longer than any wait below: a record that waits it out fails the test
LINGER_MS = 120_000


async def test_send_lingering_sends_a_batch_before_its_linger_is_up(kafka_bootstrap: str) -> None:
    topic = f"linger-{uuid.uuid4().hex[:6]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=LINGER_MS)
    await producer.start()
    try:
        await producer.partitions_for(topic)
        first = await producer.send(topic, b"first", key=b"k")
        await asyncio.sleep(1.0)
        assert not first.done()  # held for the linger
        assert send_lingering(producer)
        await asyncio.wait_for(first, 15)
        # the producer goes on as before: a later record starts a batch of its own
        second = await producer.send(topic, b"second", key=b"k")
        assert send_lingering(producer)
        assert (await asyncio.wait_for(second, 15)).offset == (await first).offset + 1
    finally:
        await producer.stop()


async def test_early_stop_decisions_and_retries_leave_before_the_linger_is_up(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, redis_url, tmp_path, "prompt", producer_linger_ms=LINGER_MS)
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    run = uuid.uuid4().hex[:6]
    done, vague = f"done-{run}", f"vague-{run}"
    redis = aioredis.from_url(redis_url)
    try:
        start = time.monotonic()
        await produce_events(
            kafka_bootstrap,
            worker.topic("events"),
            rounds(done, ["hypothesis", "experiment " + CONCLUSION]),
        )
        await produce(
            kafka_bootstrap,
            worker.topic("responses"),
            [response(vague, "hello", "Ready to assist")],
        )
        key = REDIS_CONTROL_KEY.format(request_id=done)
        while await redis.get(key) is None:  # written once the decision is on the topic
            assert time.monotonic() - start < 30, worker.tail()
            await asyncio.sleep(0.05)
        retries = await grouped(
            worker, "retries", {vague}, field="session_id", wait_for_all=True, timeout_s=30
        )
        assert [r["type"] for r in retries[vague]] == ["retry_request"]
        assert time.monotonic() - start < 45  # the linger is 120 s
    finally:
        await redis.aclose()
        worker.stop()
