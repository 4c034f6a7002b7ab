"""The one verdict output path on the real broker and Redis, and a worker with Redis down."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.integration.harness import (
    WorkerProcess,
    grouped,
    produce_events,
    refund_request,
    wait_counter,
    worker_env,
)
from tests.integration.test_cli import cli
from tests.realservices import free_port
from tests.test_verdict_making import JUDGING, closings
from tracejudge.judges.verdict.encoded import Made
from tracejudge.judges.verdict.make import make_verdict
from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.streams.judge.service import ProducerTopic, producer
from tracejudge.streams.shared.outputs import RedisSink, VerdictPublisher, redis_client

pytestmark = pytest.mark.integration


async def records_on(bootstrap: str, topic: str, partitions: int) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record on `topic` now: up to its end offsets, read from the start."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        there = sum((await consumer.end_offsets(tps)).values())
        found: list[tuple[bytes, bytes]] = []
        deadline = asyncio.get_running_loop().time() + 30
        while len(found) < there:
            assert asyncio.get_running_loop().time() < deadline
            batch = await consumer.getmany(timeout_ms=500)
            found += [(r.key, r.value) for rs in batch.values() for r in rs]
        return found
    finally:
        await consumer.stop()


async def settings_with_topics(env: dict[str, str], tmp_path: Path) -> Settings:
    """The worker's settings for `env`, its topics created by `tracejudge topics`."""
    worker = WorkerProcess(env, tmp_path / "unused.log")
    created = await asyncio.to_thread(cli, worker, "topics")
    assert created.returncode == 0, created.stderr
    return worker.settings


async def publish_all(settings: Settings, made: list[Made]) -> RedisSink:
    """Every verdict through the output path the worker and `tracejudge judge` use, on a real
    producer; returns once `publish` has returned for each (acks and Redis write included)."""
    kafka = producer(settings)
    await kafka.start()
    sink = RedisSink(redis_client(settings.redis_url), settings.evaluation_ttl_s)
    publisher = VerdictPublisher(
        ProducerTopic(kafka, settings.topic(names.EVALUATIONS)),
        ProducerTopic(kafka, settings.topic(names.REFLECTIONS)),
        ProducerTopic(kafka, settings.topic(names.ALERTS)),
        sink,
    )
    try:
        await asyncio.gather(*(publisher.publish(m) for m in made))
    finally:
        await kafka.stop()
        await sink.aclose()
    return sink


async def test_a_published_verdict_is_on_the_broker_and_in_redis_when_publish_returns(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    settings = await settings_with_topics(
        worker_env(kafka_bootstrap, redis_url, tmp_path, "vpub"), tmp_path
    )
    made = [make_verdict(JUDGING, c) for c in closings() * 2]  # twice: at-least-once
    sink = await publish_all(settings, made)
    # read right after, up to the end offsets of that moment: nothing is on its way any more
    evaluations = await records_on(
        kafka_bootstrap, settings.topic(names.EVALUATIONS), settings.partitions
    )
    reflections = await records_on(
        kafka_bootstrap, settings.topic(names.REFLECTIONS), settings.partitions
    )
    alerts = await records_on(kafka_bootstrap, settings.topic(names.ALERTS), settings.partitions)
    redis = aioredis.from_url(redis_url)
    try:
        in_redis = {
            m.request_id: await redis.get(
                names.REDIS_EVALUATION_KEY.format(request_id=m.request_id)
            )
            for m in made
        }
    finally:
        await redis.aclose()
    assert sink.errors == 0
    assert in_redis == {m.request_id: m.evaluation for m in made}
    key = [m.request_id.encode() for m in made]
    assert sorted(evaluations) == sorted(zip(key, [m.evaluation for m in made], strict=True))
    assert sorted(reflections) == sorted(
        (k, m.reflection) for k, m in zip(key, made, strict=True) if m.reflection is not None
    )
    assert sorted(alerts) == sorted(
        (k, a) for k, m in zip(key, made, strict=True) for a in m.alerts
    )
    assert reflections and alerts  # the samples include incomplete and failing requests


async def test_with_redis_down_verdicts_are_still_sent_and_the_failed_writes_counted(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # nothing listens on this loopback port: each write fails within the 1 s socket timeout
    down = f"redis://127.0.0.1:{free_port()}/0"
    settings = await settings_with_topics(
        worker_env(kafka_bootstrap, down, tmp_path, "vpubr"), tmp_path
    )
    made = [make_verdict(JUDGING, c) for c in closings()]
    sink = await asyncio.wait_for(publish_all(settings, made), 60)
    evaluations = await records_on(
        kafka_bootstrap, settings.topic(names.EVALUATIONS), settings.partitions
    )
    assert sink.errors == len(made)
    assert sorted(evaluations) == sorted((m.request_id.encode(), m.evaluation) for m in made)


async def test_a_worker_with_redis_down_publishes_every_verdict_and_counts_the_failed_writes(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"
    worker = WorkerProcess(
        worker_env(kafka_bootstrap, down, tmp_path, "redisdown"), tmp_path / "worker.log"
    )
    worker.start()
    try:
        rids = {f"rd-{i}" for i in range(3)}
        await produce_events(
            kafka_bootstrap,
            worker.topic("events"),
            [e for rid in sorted(rids) for e in refund_request(rid)],
        )
        await wait_counter(worker, len(rids), timeout_s=120)
        found = await grouped(worker, "evaluations", rids, wait_for_all=True)
        code, health = worker.health()
    finally:
        worker.stop()
    assert all(len(v) == 1 for v in found.values()), found
    # the failed writes are counted in the reading /metrics serves
    assert code == 200 and health["redis"] is True and health["redis_errors"] == len(rids)


async def test_a_pending_verdict_never_replaces_the_judges_final_one_in_redis(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    from dataclasses import replace as replaced

    from tracejudge.judges.verdict.conclude import Policy
    from tracejudge.judges.verdict.make import Judging, LLMRouting

    settings = await settings_with_topics(
        worker_env(kafka_bootstrap, redis_url, tmp_path, "vpend"), tmp_path
    )
    judged = Judging(12, Policy(), "test", LLMRouting(sample_rate=1.0, max_input_chars=4000))
    closing = closings()[0]
    pending = replaced(make_verdict(judged, closing), job=None)
    final = make_verdict(JUDGING, closing)  # stands for the judge's: same id, not pending
    assert pending.summary is not None and pending.summary.pending
    key = names.REDIS_EVALUATION_KEY.format(request_id=closing.request_id)
    redis = aioredis.from_url(redis_url)
    try:
        await redis.delete(key)  # another test of this module published the same request
        await publish_all(settings, [pending])
        assert await redis.get(key) == pending.evaluation  # a verdict at once
        # the judge's, then the pending delivered again (a crash before its record was acked)
        await publish_all(settings, [final])
        await publish_all(settings, [pending])
        assert await redis.get(key) == final.evaluation
    finally:
        await redis.delete(key)
        await redis.aclose()
