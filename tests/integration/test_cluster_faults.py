"""Issue 41: the worker on a three-broker cluster, with brokers failing under load.

Like Kafka's own replication tests (`tests/kafkatest/tests/core/replication_test.py`): the real
client sends a steady stream of requests the whole time, a broker fails, and the check is the
same after each fault: every request has one verdict, commits reach the log end, nothing was
dead-lettered, the worker never exited nor reported itself unhealthy.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.integration.harness import WorkerProcess, consume, refund_request, worker_env
from tests.kafkacluster import Cluster
from tracejudge.client import Tracer
from tracejudge.models.names import MARKER_HEADER
from tracejudge.streams.kafka.admin import ensure_topics
from tracejudge.streams.settings import Settings

pytestmark = pytest.mark.integration

PARTITIONS = 3


async def test_topics_on_a_cluster_get_three_replicas_and_two_in_sync(
    kafka_cluster: Cluster,
) -> None:
    unique = f"it-rf-{uuid.uuid4().hex[:6]}"
    settings = Settings.model_validate(
        {
            "kafka_bootstrap": kafka_cluster.bootstrap,
            "topic_prefix": f"{unique}.",
            "app_id": unique,
            "partitions": 2,
            "redis_url": "",
        }
    )
    assert settings.replication_factor is None  # not set: the cluster decides
    created = await ensure_topics(settings)
    assert settings.topic("events") in created and f"{unique}-window-steps-changelog" in created
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(created)
        replicas = {t["topic"]: {len(p["replicas"]) for p in t["partitions"]} for t in described}
        assert replicas == {name: {3} for name in created}
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name, None) for name in created]
        )
        insync = {
            name: {entry[0]: entry[1] for entry in entries}["min.insync.replicas"]
            for response in responses
            for _code, _msg, _type, name, entries, *_ in response.resources
        }
        assert insync == {name: "2" for name in created}
    finally:
        await admin.close()


def cluster_worker(cluster: Cluster, tmp_path: Path, name: str) -> WorkerProcess:
    env = worker_env(cluster.bootstrap, "", tmp_path, name, partitions=PARTITIONS)
    return WorkerProcess(env, tmp_path / f"{name}.log")


async def test_one_broker_down_leaves_the_worker_healthy_and_degraded(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    worker = cluster_worker(kafka_cluster, tmp_path, "one-down").start()
    leaders = await kafka_cluster.leaders(worker.topic("events"))
    victim = leaders[0]
    try:
        kafka_cluster.kill9(victim)
        seen: list[tuple[int, str, object]] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            code, body = worker.health()
            seen.append((code, str(body.get("broker")), body.get("brokers")))
            await asyncio.sleep(0.2)
        assert {code for code, _, _ in seen} == {200}, (seen, worker.tail())
        assert ("degraded", {"answering": 2, "known": 3}) in [(b, n) for _, b, n in seen], seen
    finally:
        await kafka_cluster.restart(victim)
        worker.stop()
    assert worker.process is not None and worker.process.returncode in (0, -15), worker.tail()


@dataclass
class Load:
    """The real client sending small complete requests at `rate` a second from a thread."""

    tracer: Tracer
    rate: float
    duration_s: float
    sent_at: dict[str, float] = field(default_factory=dict)  # request id -> final event's time
    thread: threading.Thread | None = None

    def start(self) -> Load:
        self.thread = threading.Thread(target=self._run, name="load", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        begin = time.monotonic()
        count = int(self.rate * self.duration_s)
        for i in range(count):  # bounded: `count` requests, each at its slot
            pause = begin + i / self.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            rid = f"load-{i}-{uuid.uuid4().hex[:6]}"
            for event in refund_request(rid):
                assert self.tracer.emit(event)
            self.sent_at[rid] = time.time()

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join(timeout=self.duration_s + 60)
        assert not self.thread.is_alive()


@dataclass
class HealthWatch:
    """/health polled the whole time: every answer's code."""

    worker: WorkerProcess
    codes: Counter[int] = field(default_factory=Counter)
    bad: list[tuple[float, int, dict[str, object]]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def start(self) -> HealthWatch:
        threading.Thread(target=self._run, name="health", daemon=True).start()
        return self

    def _run(self) -> None:
        while not self.stopping.wait(0.5):
            code, body = self.worker.health()
            self.codes[code] += 1
            if code != 200:
                self.bad.append((time.time(), code, body))


async def commits_behind(
    bootstrap: str, group: str, topic: str, timeout_s: float
) -> dict[str, Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        deadline = time.monotonic() + timeout_s
        while True:
            ends = await consumer.end_offsets(tps)
            committed = {tp: await consumer.committed(tp) for tp in tps}
            behind = {tp.partition: ends[tp] - (committed[tp] or 0) for tp in tps}
            if not any(behind.values()) or time.monotonic() > deadline:
                return {"behind": behind, "events": sum(ends.values())}
            await asyncio.sleep(1)
    finally:
        await consumer.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def test_the_events_leader_killed_under_load_loses_nothing(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    worker = cluster_worker(kafka_cluster, tmp_path, "leader-kill").start()
    events = worker.topic("events")
    tracer = Tracer(kafka_cluster.bootstrap, topic_prefix=worker.settings.topic_prefix)
    health = HealthWatch(worker).start()
    leaders = Counter((await kafka_cluster.leaders(events)).values())
    victim = leaders.most_common(1)[0][0]  # the leader of most events partitions
    load = Load(tracer, rate=20, duration_s=40).start()
    try:
        await asyncio.sleep(10)
        kafka_cluster.kill9(victim)
        killed_at = time.time()
        await asyncio.sleep(20)
        await kafka_cluster.restart(victim)
        restarted_at = time.time()
        load.join()
        assert tracer.flush(60), "the client could not deliver everything"
        records = await consume(
            kafka_cluster.bootstrap,
            worker.topic("evaluations"),
            until=lambda rs: (
                len({json.loads(r.value)["request_id"] for r in rs}) >= len(load.sent_at)
            ),
            timeout_s=120,
            settle_s=2,
        )
        verdicts: dict[str, set[str]] = {rid: set() for rid in load.sent_at}
        late: dict[str, float] = {}
        stamps = []
        for record in records:
            value = json.loads(record.value)
            rid = value["request_id"]
            if rid not in verdicts:
                continue
            verdicts[rid].add(value["evaluation_id"])
            late.setdefault(rid, record.timestamp / 1000 - load.sent_at[rid])
            stamps.append(record.timestamp / 1000)
        missing = [rid for rid, ids in verdicts.items() if not ids]
        assert not missing, f"{len(missing)} of {len(verdicts)} without a verdict:\n{worker.tail()}"
        assert all(len(ids) == 1 for ids in verdicts.values())  # duplicates share the id
        duplicates = len(stamps) - len(verdicts)
        behind = await commits_behind(kafka_cluster.bootstrap, worker.settings.app_id, events, 60)
        assert not any(behind["behind"].values()), behind
        # the client delivered every event once (an idempotent producer: no retry duplicates);
        # the worker's own markers in the events topic are left out
        sent = await consume(
            kafka_cluster.bootstrap, events, until=lambda rs: len(rs) >= behind["events"]
        )
        delivered = Counter(
            (v["request_id"], v["type"], v.get("step_index"))
            for r in sent
            if not any(k == MARKER_HEADER for k, _ in r.headers)
            for v in [json.loads(r.value)]
        )
        assert len(delivered) == 4 * len(load.sent_at) and tracer.dropped == 0
        assert set(delivered.values()) == {1}, delivered.most_common(3)
        dead = await consume(
            kafka_cluster.bootstrap, worker.topic("dlq"), until=lambda rs: False, timeout_s=3
        )
        assert not dead, [r.value[:300] for r in dead]
        health.stopping.set()
        assert worker.process is not None and worker.process.poll() is None, worker.tail()
        assert worker.starts == 1
        assert not health.bad, (health.bad[:5], worker.tail())
        during = [
            s for rid, s in late.items() if killed_at <= load.sent_at[rid] <= restarted_at + 10
        ]
        stamps.sort()
        gap = max((b - a for a, b in itertools.pairwise(stamps)), default=0.0)
        print(
            f"\nleader kill -9 under load: {len(verdicts)} requests, {duplicates} duplicates, "
            f"time to verdict p50 {statistics.median(late.values()):.2f}s "
            f"p99 {percentile(list(late.values()), 0.99):.2f}s overall; during the fault "
            f"p50 {statistics.median(during):.2f}s p99 {percentile(during, 0.99):.2f}s "
            f"max {max(during):.2f}s; longest gap between verdicts {gap:.2f}s; "
            f"health {dict(health.codes)}"
        )
    finally:
        health.stopping.set()
        tracer.close(5)
        worker.stop()
        if victim not in kafka_cluster.running():
            await kafka_cluster.restart(victim)
