"""The verdict process sends the verdicts it makes, and answers once the broker has them."""

from __future__ import annotations

import asyncio
import dataclasses
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
from tests.test_verdict_process import JUDGING, closings
from tracejudge.models import names
from tracejudge.streams.settings import Settings
from tracejudge.streams.worker.verdict_making import make_verdict
from tracejudge.streams.worker.verdict_process import ProcessMaker

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


async def test_the_verdict_process_answers_only_once_its_records_are_on_the_broker(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    settings = await settings_with_topics(
        worker_env(kafka_bootstrap, redis_url, tmp_path, "vpub"), tmp_path
    )
    maker = ProcessMaker(JUDGING, publishing=settings)
    try:
        asked = closings() * 2  # the second time: the same records again (at-least-once)
        made = await asyncio.gather(*(maker(c) for c in asked))
        # read right after the answers, up to the end offsets of that moment: nothing is on
        # its way any more
        evaluations = await records_on(
            kafka_bootstrap, settings.topic(names.EVALUATIONS), settings.partitions
        )
        reflections = await records_on(
            kafka_bootstrap, settings.topic(names.REFLECTIONS), settings.partitions
        )
        alerts = await records_on(
            kafka_bootstrap, settings.topic(names.ALERTS), settings.partitions
        )
        # and the evaluations are in Redis already, under the key agents look them up by
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
    finally:
        await maker.close()
    assert in_redis == {m.request_id: m.evaluation for m in made}
    assert all(m.published and m.stored for m in made)
    # what it sent is what the worker would have made and sent itself, keyed by request id
    assert [dataclasses.replace(m, published=False, stored=None) for m in made] == [
        make_verdict(JUDGING, c) for c in asked
    ]
    key = [m.request_id.encode() for m in made]
    assert sorted(evaluations) == sorted(zip(key, [m.evaluation for m in made], strict=True))
    assert sorted(reflections) == sorted(
        (k, m.reflection) for k, m in zip(key, made, strict=True) if m.reflection is not None
    )
    assert sorted(alerts) == sorted(
        (k, a) for k, m in zip(key, made, strict=True) for a in m.alerts
    )
    assert reflections and alerts  # the samples include incomplete and failing requests


async def test_with_redis_down_the_verdict_process_still_sends_and_says_the_write_failed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # nothing listens on this loopback port: each write fails within the 1 s socket timeout
    down = f"redis://127.0.0.1:{free_port()}/0"
    settings = await settings_with_topics(
        worker_env(kafka_bootstrap, down, tmp_path, "vpubr"), tmp_path
    )
    maker = ProcessMaker(JUDGING, publishing=settings)
    try:
        asked = closings()
        made = await asyncio.wait_for(asyncio.gather(*(maker(c) for c in asked)), 60)
        evaluations = await records_on(
            kafka_bootstrap, settings.topic(names.EVALUATIONS), settings.partitions
        )
    finally:
        await maker.close()
    assert [(m.published, m.stored) for m in made] == [(True, False)] * len(asked)
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
    # the writes failed in the verdict process; the worker's reading counts them
    assert code == 200 and health["redis"] is True and health["redis_errors"] == len(rids)
