"""The worker's tables on disk (RocksDB): a restart on the same data directory keeps its open
windows without replaying the changelogs, and a worker killed -9 comes back with them too."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import PolicyViolationError

from tests.integration.harness import (
    WorkerProcess,
    grouped,
    produce_events,
    refund_request,
    wait_counter,
    worker_env,
)
from tracejudge.models.names import TABLES, changelog_topic

pytestmark = pytest.mark.integration

REQUESTS = 12


async def empty_changelogs(worker: WorkerProcess) -> int:
    """Delete every record of the worker's table changelogs; how many there were."""
    bootstrap = worker.settings.kafka_bootstrap
    topics = [changelog_topic(worker.settings.app_id, table) for table in TABLES]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await consumer.start()
    await admin.start()
    try:
        partitions = range(worker.settings.partitions)
        tps = [TopicPartition(topic, p) for topic in topics for p in partitions]
        ends = await consumer.end_offsets(tps)
        # The broker refuses DeleteRecords on a compact-only topic; the worker sets the
        # changelogs' configuration back at its next start.
        delete = {"cleanup.policy": "compact,delete"}
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, delete) for topic in topics]
        )
        for _ in range(50):  # until the broker has applied the new policy
            try:
                await admin.delete_records(
                    {tp: RecordsToDelete(end) for tp, end in ends.items() if end}
                )
                break
            except PolicyViolationError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("the broker kept refusing to delete changelog records")
        starts = await consumer.beginning_offsets(tps)
        assert starts == ends
        return sum(ends.values())
    finally:
        await admin.close()
        await consumer.stop()


async def half_then_rest(worker: WorkerProcess, rids: list[str], restart: str, held: bool) -> None:
    """Each request's first two events, a restart, then its last two."""
    events = worker.topic("events")
    await produce_events(worker.settings.kafka_bootstrap, events, _part(rids, 0, 2))
    await wait_counter(worker, 2 * len(rids), "events_added", timeout_s=60)
    if restart == "sigterm":
        worker.stop()
        written = await empty_changelogs(worker)
        # held: nothing written, the unacknowledged input records are read again instead
        assert written == 0 if held else written > 0
    else:
        worker.kill9()
    worker.start()
    await produce_events(worker.settings.kafka_bootstrap, events, _part(rids, 2, 4))


def _part(rids: list[str], start: int, end: int) -> list[dict[str, object]]:
    return [event for rid in rids for event in refund_request(rid)[start:end]]


@pytest.mark.parametrize("held", [False, True], ids=["written", "held"])
@pytest.mark.parametrize("restart", ["sigterm", "kill9"])
async def test_open_windows_survive_a_restart_from_the_local_store(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, restart: str, held: bool
) -> None:
    env = worker_env(kafka_bootstrap, redis_url, tmp_path, f"store-{restart}")
    env["TRACEJUDGE_STEP_HOLD_S"] = "60" if held else "0"
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    run = uuid.uuid4().hex[:6]
    rids = [f"disk-{run}-{i}" for i in range(REQUESTS)]
    try:
        # With sigterm the changelogs are emptied while the worker is down: only the local
        # store (steps written) or the input topic (steps held) can still know the first half
        # of each request.
        await half_then_rest(worker, rids, restart, held)
        evaluations = await grouped(
            worker, "evaluations", set(rids), wait_for_all=True, timeout_s=60, settle_s=2
        )
    finally:
        worker.stop()
    for rid, evs in evaluations.items():
        assert len({e["evaluation_id"] for e in evs}) == 1, (rid, evs)
        first = evs[0]
        # both tool calls: the one before the restart was kept
        assert first["closed_by"] == "final_response" and first["step_count"] == 2, first
