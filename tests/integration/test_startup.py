"""The worker creates its own topics and refuses a partition mismatch with one clear line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.integration.harness import WorkerProcess, worker_env
from tests.realservices import ROOT
from tracejudge.models.names import changelog_topic
from tracejudge.streams.kafka.admin import changelog_config, ensure_topics, topic_specs
from tracejudge.streams.kafka.replication import config_values

pytestmark = pytest.mark.integration


async def partition_counts(bootstrap: str, names: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(names)
        return {t["topic"]: len(t["partitions"]) for t in described if not t["error_code"]}
    finally:
        await admin.close()


async def test_worker_creates_its_topics_and_reports_ready_only_when_ready(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    worker = WorkerProcess(
        worker_env(kafka_bootstrap, redis_url, tmp_path, "topics", partitions=5),
        tmp_path / "worker.log",
    )
    worker.start()
    # the web server answers before the worker is ready, and says so
    assert worker.health_codes == [503, 200]
    try:
        names = [s.name for s in topic_specs(worker.settings)]
        counts = await partition_counts(kafka_bootstrap, names)
        assert counts == {name: 5 for name in names}
    finally:
        worker.stop()


async def test_partition_mismatch_stops_the_worker_with_one_clear_line(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, redis_url, tmp_path, "mismatch", partitions=3)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    events = env["TRACEJUDGE_TOPIC_PREFIX"] + "events"
    try:
        await admin.create_topics([NewTopic(events, 2, 1)])
    finally:
        await admin.close()
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tracejudge.streams.cli", "worker"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if "partition mismatch" in line]
    assert len(lines) == 1, result.stderr
    assert f"{events} has 2" in lines[0] and "TRACEJUDGE_PARTITIONS" in lines[0]


async def changelog_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, None)]
        )
        (resource,) = response.resources
        return config_values(resource[4])
    finally:
        await admin.close()


async def test_changelogs_get_the_cleanup_that_removes_closed_windows(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, "", tmp_path, "compact")
    settings = WorkerProcess(env, tmp_path / "unused.log").settings
    meta = changelog_topic(settings.app_id, "window-meta")
    steps = changelog_topic(settings.app_id, "window-steps")
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:  # as an earlier version created it: compact alone
        await admin.create_topics(
            [NewTopic(meta, settings.partitions, 1, topic_configs={"cleanup.policy": "compact"})]
        )
    finally:
        await admin.close()
    await ensure_topics(settings)
    for table, topic in (("window-meta", meta), ("window-steps", steps)):  # aligned, created
        wanted = changelog_config(settings, table)
        deadline = time.monotonic() + 30  # a broker applies altered configs a moment later
        while True:
            configs = await changelog_configs(kafka_bootstrap, topic)
            current = {k: configs[k] for k in wanted}
            if current == wanted or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert current == wanted, topic
    # no tombstones: closed windows leave the window changelogs by retention, markers last
    steps_ms = int(changelog_config(settings, "window-steps")["retention.ms"])
    meta_ms = int(changelog_config(settings, "window-meta")["retention.ms"])
    assert changelog_config(settings, "window-steps")["cleanup.policy"] == "delete"
    assert meta_ms > steps_ms + settings.closed_retention_s * 1000
