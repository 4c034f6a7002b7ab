"""The verdict process sends the verdicts it makes, and answers once the broker has them."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.integration.harness import WorkerProcess, worker_env
from tests.realservices import ROOT
from tests.test_verdict_process import JUDGING, closings
from tracejudge.streams import names
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


async def test_the_verdict_process_answers_only_once_its_records_are_on_the_broker(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, redis_url, tmp_path, "vpub")
    settings = WorkerProcess(env, tmp_path / "unused.log").settings
    await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tracejudge.streams.cli", "topics"],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        capture_output=True,
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
    finally:
        await maker.close()
    assert all(m.published for m in made)
    # what it sent is what the worker would have made and sent itself, keyed by request id
    assert [dataclasses.replace(m, published=False) for m in made] == [
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
