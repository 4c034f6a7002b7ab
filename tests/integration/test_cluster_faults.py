"""The worker on a three-broker cluster, with brokers failing under load.

Like Kafka's own replication tests (`tests/kafkatest/tests/core/replication_test.py`): the real
client sends a steady stream of requests the whole time, a broker fails, and the check is the
same after each fault: every request has one verdict, commits reach the log end, nothing was
dead-lettered, the worker never exited nor reported itself unhealthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from redis.asyncio import Redis

from tests.integration.harness import WorkerProcess, consume, refund_request, worker_env
from tests.kafkacluster import NODES, Cluster
from tests.realservices import Service, launch_redis
from tests.soak import runs
from tracejudge.client import Tracer
from tracejudge.judges.windows.records import WindowMeta
from tracejudge.models import names
from tracejudge.models.names import MARKER_HEADER, REDIS_EVALUATION_KEY, changelog_topic
from tracejudge.settings import Settings
from tracejudge.streams.kafka.admin import ensure_topics
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.kafka.replication import config_values
from tracejudge.streams.replay.engine import replay_tables
from tracejudge.streams.worker.windows import SEP

pytestmark = pytest.mark.integration  # in one process with every test on the cluster: conftest

PARTITIONS = 3


def topic_settings(cluster: Cluster, unique: str) -> Settings:
    """A worker's settings for topics of its own on `cluster`, two partitions each."""
    return Settings.model_validate(
        {
            "kafka_bootstrap": cluster.bootstrap,
            "topic_prefix": f"{unique}.",
            "app_id": unique,
            "partitions": 2,
            "redis_url": "",
        }
    )


async def test_topics_on_a_cluster_get_three_replicas_and_two_in_sync(
    kafka_cluster: Cluster,
) -> None:
    unique = f"it-rf-{uuid.uuid4().hex[:6]}"
    settings = topic_settings(kafka_cluster, unique)
    assert settings.replication_factor is None  # not set: the cluster decides
    # every broker in every node's metadata: on a loaded host a broker can miss its heartbeats
    # and be fenced a moment, and a new cluster has no topic telling of it (see below)
    await kafka_cluster.wait_brokers(NODES, every_node=True)
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
            name: config_values(entries)["min.insync.replicas"]
            for response in responses
            for _code, _msg, _type, name, entries, *_ in response.resources
        }
        assert insync == {name: "2" for name in created}
    finally:
        await admin.close()


async def test_a_broker_down_at_start_still_gets_its_replicas(
    kafka_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker started while a broker is down (fenced after missed heartbeats, restarting in a
    rolling upgrade) once counted only the brokers in the metadata and made its topics with two
    replicas for good. The replicas existing topics keep name the broker; KRaft places new
    replicas on it, and they catch up when it is back."""
    await healthy_cluster(kafka_cluster)
    unique = f"it-down-{uuid.uuid4().hex[:6]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap)
    await admin.start()
    try:  # a topic the cluster had: its replicas are on every broker
        made = await admin.create_topics([NewTopic(f"{unique}.old", 3, 3)])
        assert [code for _topic, code, *_ in made.topic_errors] == [0], made
    finally:
        await admin.close()
    victim = max(kafka_cluster.running())
    kafka_cluster.kill9(victim)
    try:
        # until the controller fenced it, as every node left sees it
        await kafka_cluster.wait_brokers(NODES - 1, timeout_s=60, every_node=True)
        settings = topic_settings(kafka_cluster, unique)
        with caplog.at_level(logging.INFO, logger="tracejudge.streams.kafka.admin"):
            created = await ensure_topics(settings)
        assert "created topics with 3 replicas" in caplog.text, caplog.text
        assert "2 brokers up" in caplog.text
        listed = await kafka_cluster._ask(lambda a: a.describe_topics(created))
        replicas = {t["topic"]: {len(p["replicas"]) for p in t["partitions"]} for t in listed}
        assert replicas == {name: {3} for name in created}
    finally:
        await kafka_cluster.restart(victim)


async def test_existing_topics_keep_their_replication_and_are_named_when_short(
    kafka_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Topics made before the worker (another tool, a smaller cluster) are not changed, but a
    gap is named at start; a changelog's cleanup settings are set without dropping its own
    min.insync.replicas (AlterConfigs replaces a topic's settings whole)."""
    unique = f"it-old-{uuid.uuid4().hex[:6]}"
    settings = topic_settings(kafka_cluster, unique)
    one_copy, lone, steps = (
        settings.topic("events"),
        settings.topic("evaluations"),
        changelog_topic(unique, names.WINDOW_STEPS),
    )
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap)
    await admin.start()
    try:
        made = await admin.create_topics(
            [
                # the cluster's default min ISR is 2: a single copy says 1, as a small cluster's did
                NewTopic(one_copy, 2, 1, topic_configs={"min.insync.replicas": "1"}),
                NewTopic(lone, 2, 3, topic_configs={"min.insync.replicas": "1"}),
                # as an earlier version left it: compacted, with the worker's min ISR
                NewTopic(
                    steps,
                    2,
                    3,
                    topic_configs={
                        "min.insync.replicas": "2",
                        "max.message.bytes": "2097152",  # not a default, unlike the 2 here
                        "cleanup.policy": "compact",
                    },
                ),
            ]
        )
        assert [code for _topic, code, *_ in made.topic_errors] == [0, 0, 0], made
        for node in kafka_cluster.running():  # every broker knows them: the worker asks any
            for topic in (one_copy, lone, steps):
                for _ in range(60):
                    with contextlib.suppress(Exception):
                        found = await kafka_cluster.partitions(topic, via=node)
                        if len(found) == 2 and all(lead >= 0 for lead, _ in found.values()):
                            break
                    await asyncio.sleep(0.5)
        with caplog.at_level(logging.INFO, logger="tracejudge.streams.kafka"):
            created = await ensure_topics(settings)
        assert not {one_copy, lone, steps} & set(created)
        warned = [r.getMessage() for r in caplog.records if "existing topics" in r.getMessage()]
        assert len(warned) == 2, warned
        assert f"{one_copy} (1 replica, min.insync 1)" in warned[0]
        assert lone not in warned[0] and steps not in "".join(warned)
        assert f"{lone} (3 replicas, min.insync 1)" in warned[1]

        assert f"set cleanup settings of {steps}" in caplog.text
        # the controller has the change when the call returns; the broker asked here may apply
        # it a moment later (seen once, on a busy box)
        for _ in range(60):
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, steps, None)]
            )
            (entries,) = [
                e for response in responses for _c, _m, _t, _n, e, *_ in response.resources
            ]
            now = config_values(entries)
            if now["cleanup.policy"] == "delete":  # the worker's, set
                break
            await asyncio.sleep(0.5)
        assert now["cleanup.policy"] == "delete"
        assert (now["min.insync.replicas"], now["max.message.bytes"]) == ("2", "2097152")
        described = await admin.describe_topics([one_copy])
        assert {len(p["replicas"]) for p in described[0]["partitions"]} == {1}  # not changed
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
    stopping: threading.Event = field(default_factory=threading.Event)  # `stop`: end early

    def start(self) -> Load:
        self.thread = threading.Thread(target=self._run, name="load", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        begin = time.monotonic()
        count = int(self.rate * self.duration_s)
        for i in range(count):  # bounded: `count` requests, each at its slot
            pause = begin + i / self.rate - time.monotonic()
            if self.stopping.wait(max(0.0, pause)):
                return
            rid = f"load-{i}-{uuid.uuid4().hex[:6]}"
            for event in refund_request(rid):
                assert self.tracer.emit(event)
            self.sent_at[rid] = time.time()

    def stop(self) -> None:
        """No more requests after the one being sent (a fault's length is not known ahead)."""
        self.stopping.set()

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
    bootstrap: str, group: str, topic: str, timeout_s: float, partitions: int = PARTITIONS
) -> dict[str, Any]:
    """The group's committed offsets against the log end, every partition of `topic`."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
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


async def read_to_end(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0
) -> list[ConsumerRecord]:
    """Every record of `topic` up to the end offsets it has when asked, partition by partition
    in their order."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, metadata_max_age_ms=1000
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout_s
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            assert time.monotonic() < deadline, f"{topic} not read to {ends} in {timeout_s}s"
            batch = await consumer.getmany(timeout_ms=200)
            records += [r for rs in batch.values() for r in rs]
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        await consumer.stop()


# What a closed marker says that does not depend on time: where the window is, how many records
# and steps it had, what closed it and at which record. Left out: `closed_at` and
# `last_event_at` (clocks) and `flushed` (how many steps the hold let through to the changelog
# before the close: timing, `windows.py`).
COMPARED_META = (
    "partition",
    "next_seq",
    "step_count",
    "steps_dropped",
    "late_events",
    "closed_by",
    "closed_offset",
    "early_stops",
)


@dataclass(frozen=True)
class TableState:
    closed: dict[str, dict[str, Any]]  # request id -> its closed marker's COMPARED_META
    open: set[str]  # request ids a recovery would rebuild an open window for
    retry_state: set[str]  # keys of the retry marks


def table_state(meta: dict[str, Any], steps: dict[str, Any], retries: dict[str, Any]) -> TableState:
    """What a worker recovering these tables would hold (`WindowStore.reindex`): a closed window
    for each closed marker, an open one for each first step record without one."""
    markers = {rid: WindowMeta.of_record(record) for rid, record in meta.items()}
    closed = {
        rid: {name: getattr(m, name) for name in COMPARED_META}
        for rid, m in markers.items()
        if m.closed
    }
    firsts = {key.rpartition(SEP)[0] for key in steps if key.endswith(f"{SEP}000000")}
    return TableState(closed, firsts - closed.keys(), set(retries))


async def changelog_tables(bootstrap: str, settings: Settings) -> TableState:
    """The tables as their changelogs hold them, read to the end: the last record of a key wins
    (a tombstone deletes it), as a recovery restores them."""

    async def latest(table: str) -> dict[str, bytes]:
        topic = changelog_topic(settings.app_id, table)
        found: dict[str, bytes] = {}
        for record in await read_to_end(bootstrap, topic, settings.partitions):
            key = json.loads(record.key)  # Faust's json key serializer
            if record.value is None:
                found.pop(key, None)
            else:
                found[key] = record.value
        return found

    meta = {k: json.loads(v) for k, v in (await latest(names.WINDOW_META)).items()}
    return table_state(meta, await latest(names.WINDOW_STEPS), await latest(names.RETRY_STATE))


async def tables_agree_with_replay(
    bootstrap: str, settings: Settings, events: list[ConsumerRecord]
) -> TableState:
    """The changelog-backed tables after a fault against a fresh replay of the events topic.

    The worker's changelogs (window meta, window steps, retry marks) are read to their end and
    restored as a recovering worker would; the agents' records of the events topic (not the
    worker's own markers, whose effect depends on when they are read) go through the worker's
    handlers in memory (`replay_tables`), each at its own partition and offset. They must agree
    on what a worker taking the partitions over would act on:
    - the same closed requests, each closed by the same record (`closed_offset`) with the same
      counts (a step lost or counted twice across the fault, a window closed twice, a redelivery
      counted as a late event, all show here);
    - the same open windows (none, when every request is complete): a window left open in the
      changelog for a request whose evaluation was published would be closed again by the idle
      scan of the next owner, a second, different verdict;
    - the same retry marks.
    Not compared: which step records the changelog holds (the hold writes only windows that stay
    open long enough, by the clock) and the agents' baselines (written by a timer, at most once
    a second: by the clock too)."""
    topic = settings.topic(names.EVENTS)
    records = [
        InRecord(topic, r.partition, r.offset, r.key, r.value)
        for r in sorted(events, key=lambda r: (r.partition, r.offset))
        if not any(k == MARKER_HEADER for k, _ in r.headers)
    ]
    tables = await replay_tables(settings.model_copy(update={"redis_url": ""}), records)
    replayed = table_state(
        dict(tables.window_meta), dict(tables.window_steps), dict(tables.retry_state)
    )
    live = await changelog_tables(bootstrap, settings)
    assert live.closed.keys() == replayed.closed.keys(), (
        sorted(live.closed.keys() - replayed.closed.keys())[:5],
        sorted(replayed.closed.keys() - live.closed.keys())[:5],
    )
    differ = {
        rid: (m, replayed.closed[rid])
        for rid, m in live.closed.items()
        if m != replayed.closed[rid]
    }
    assert not differ, (len(differ), list(differ.items())[:3])
    assert live.open == replayed.open, (sorted(live.open)[:5], sorted(replayed.open)[:5])
    assert live.retry_state == replayed.retry_state
    return live


async def healthy_cluster(cluster: Cluster) -> None:
    """Before a run: every node running (none paused), listed by every node, and the offsets
    topic's replicas all in sync, so no run starts in the previous one's fault."""
    for node_id, node in cluster.nodes.items():
        cluster.resume(node)
        if node_id not in cluster.running():
            await cluster.restart(node_id)
    await cluster.wait_brokers(NODES, every_node=True)
    await cluster.wait_in_sync(["__consumer_offsets"], timeout_s=90)


def worker_topics(worker: WorkerProcess) -> list[str]:
    return [worker.topic(names.EVENTS), worker.topic(names.EVALUATIONS)] + [
        changelog_topic(worker.settings.app_id, t) for t in names.TABLES
    ]


@dataclass
class Fault:
    """What a fault needs and what it tells: when it began and when it was over."""

    cluster: Cluster
    worker: WorkerProcess
    redis: Service | None = None
    began: float = 0.0  # time.time()
    ended: float = 0.0
    # verdicts must go on being published while the fault lasts (not only after it)
    verdicts_during: bool = False
    notes: dict[str, object] = field(default_factory=dict)  # printed with the figures
    sent_at: dict[str, float] = field(default_factory=dict)  # the load's requests, when sent


LOAD_RATE = 20.0  # requests a second, 4 events each
WARM_S = 5.0  # load before the fault
AFTER_S = 8.0  # load after it is over
LOAD_MAX_S = 120.0  # bound on the load's length; it is stopped AFTER_S after the fault


async def under_load(
    fault: Callable[[Fault], Awaitable[None]],
    name: str,
    run: int,
    cluster: Cluster,
    tmp_path: Path,
    redis: Service | None = None,
) -> Fault:
    """One run: a fresh worker (own topics and group), the real client's steady load, the
    fault, then every check; prints one line of figures."""
    await healthy_cluster(cluster)
    redis_url = redis.address if redis is not None else ""
    env = worker_env(
        cluster.bootstrap,
        redis_url,
        tmp_path,
        f"{name}{run}",
        partitions=PARTITIONS,
        # No worker dies here, so harness's 10 s (a killed worker's partitions back soon) buys
        # nothing; it is shorter than a paused coordinator's 15 s, and a member whose session
        # runs out while its coordinator is frozen is dropped and rejoins: a rebalance, /health
        # 503 "starting" for ~8 s (seen in a broker-pause run). 30 s keeps production's order
        # (replica lag 30 s < session 60 s) on this cluster's 10 s replica lag.
        broker_session_timeout_s=30,
    )
    worker = WorkerProcess(env, tmp_path / f"{name}.log").start()
    events = worker.topic(names.EVENTS)
    tracer = Tracer(cluster.bootstrap, topic_prefix=worker.settings.topic_prefix)
    health = HealthWatch(worker).start()
    state = Fault(cluster, worker, redis)
    load: Load | None = None
    begun = time.monotonic()
    try:
        await cluster.wait_in_sync(worker_topics(worker))
        load = Load(tracer, rate=LOAD_RATE, duration_s=LOAD_MAX_S).start()
        await asyncio.sleep(WARM_S)
        await fault(state)
        assert state.began and state.ended, "the fault did not say when it happened"
        await asyncio.sleep(AFTER_S)
        load.stop()
        load.join()
        assert tracer.flush(60), "the client could not deliver everything"
        records = await consume(
            cluster.bootstrap,
            worker.topic(names.EVALUATIONS),
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
        behind = await commits_behind(cluster.bootstrap, worker.settings.app_id, events, 60)
        assert not any(behind["behind"].values()), behind
        # the client delivered every event once (an idempotent producer: no retry duplicates);
        # the worker's own markers in the events topic are left out
        sent = await read_to_end(cluster.bootstrap, events, PARTITIONS)
        delivered = Counter(
            (v["request_id"], v["type"], v.get("step_index"))
            for r in sent
            if not any(k == MARKER_HEADER for k, _ in r.headers)
            for v in [json.loads(r.value)]
        )
        assert len(delivered) == 4 * len(load.sent_at) and tracer.dropped == 0
        assert set(delivered.values()) == {1}, delivered.most_common(3)
        dead = await consume(
            cluster.bootstrap, worker.topic(names.DLQ), until=lambda rs: False, timeout_s=3
        )
        assert not dead, [r.value[:300] for r in dead]
        tables = await tables_agree_with_replay(cluster.bootstrap, worker.settings, sent)
        health.stopping.set()
        assert worker.process is not None and worker.process.poll() is None, worker.tail()
        assert worker.starts == 1
        assert not health.bad, (health.bad[:5], worker.tail())
        during = [
            s for rid, s in late.items() if state.began <= load.sent_at[rid] <= state.ended + 10
        ]
        assert during, "no request was sent during the fault"
        stamps.sort()
        gap = max((b - a for a, b in itertools.pairwise(stamps)), default=0.0)
        while_down = sum(state.began <= s <= state.ended for s in stamps)
        assert while_down or not state.verdicts_during, (state, worker.tail())
        print(
            f"\nfault {name} run {run}: {len(verdicts)} requests, fault "
            f"{state.ended - state.began:.1f}s ({while_down} verdicts meanwhile); "
            f"time to verdict during the fault "
            f"p50 {statistics.median(during):.2f}s p99 {percentile(during, 0.99):.2f}s "
            f"max {max(during):.2f}s (overall p50 {statistics.median(late.values()):.2f}s); "
            f"longest gap between verdicts {gap:.2f}s; duplicates {duplicates}; "
            f"health {dict(health.codes)}; tables: {len(tables.closed)} closed, "
            f"{len(tables.open)} open, as replayed; run {time.monotonic() - begun:.0f}s"
            + "".join(f"; {k} {v}" for k, v in state.notes.items())
        )
        state.sent_at = load.sent_at
        return state
    finally:
        health.stopping.set()
        if load is not None:
            load.stop()
        tracer.close(5)
        worker.stop()


RUNS = runs()  # once here; `scripts/soak.sh N` repeats each fault N times in a row


def events_leader(counts: dict[int, int]) -> int:
    """The node leading most of the events partitions."""
    return Counter(counts.values()).most_common(1)[0][0]


async def killed_and_restarted(fault: Fault, victim: int, down_s: float = 10.0) -> None:
    """`victim` killed -9, started again `down_s` later."""
    fault.notes["node"] = victim
    fault.cluster.kill9(victim)
    fault.began = time.time()
    await asyncio.sleep(down_s)
    await fault.cluster.restart(victim)
    fault.ended = time.time()


async def leader_killed(fault: Fault) -> None:
    """The leader of most events partitions killed -9, started again 10 s later."""
    leaders = await fault.cluster.leaders(fault.worker.topic(names.EVENTS))
    await killed_and_restarted(fault, events_leader(leaders))


@pytest.mark.parametrize("run", RUNS)
async def test_the_events_leader_killed_under_load_loses_nothing(
    kafka_cluster: Cluster, tmp_path: Path, run: int
) -> None:
    await under_load(leader_killed, "leader-kill", run, kafka_cluster, tmp_path)


async def coordinator_killed(fault: Fault) -> None:
    """The consumer group's coordinator killed -9, started again 10 s later: the worker must
    find the new one (a worker once kept sending the lookup to the dead node)."""
    await killed_and_restarted(
        fault, await fault.cluster.coordinator_of(fault.worker.settings.app_id)
    )


@pytest.mark.parametrize("run", RUNS)
async def test_the_group_coordinator_killed_under_load_loses_nothing(
    kafka_cluster: Cluster, tmp_path: Path, run: int
) -> None:
    await under_load(coordinator_killed, "coordinator-kill", run, kafka_cluster, tmp_path)


async def rolling_restart(fault: Fault) -> None:
    """Each broker in turn stopped with SIGTERM (a controlled shutdown: its leaderships moved
    first), started again 2 s after it exited, and the next one only once every replica of the
    worker's topics is in sync again: an upgrade as operators do it."""
    cluster = fault.cluster
    topics = [*worker_topics(fault.worker), "__consumer_offsets"]
    fault.began = time.time()
    for node_id, node in cluster.nodes.items():
        process = node.process
        assert process is not None
        node.stop()  # SIGTERM, SIGKILL after 30 s
        # exited on its own after the SIGTERM (a controlled shutdown), not killed after 30 s;
        # its exit code is the JVM's and varies with how the shutdown hooks end (0, 1, 143)
        assert process.returncode != -9, f"node {node_id} had to be killed"
        await asyncio.sleep(2)
        await cluster.restart(node_id)
        await cluster.wait_in_sync(topics, timeout_s=60)
    fault.ended = time.time()


@pytest.mark.parametrize("run", RUNS)
async def test_a_rolling_restart_under_load_loses_nothing(
    kafka_cluster: Cluster, tmp_path: Path, run: int
) -> None:
    await under_load(rolling_restart, "rolling-restart", run, kafka_cluster, tmp_path)


PAUSE_S = 15.0  # past the cluster's replica.lag.time.max.ms (10 s, kafkacluster.py)


async def broker_paused(fault: Fault) -> None:
    """The group's coordinator stopped (SIGSTOP) for PAUSE_S, then continued: it keeps its
    sockets but answers nothing, drops out of the in-sync replicas, and its leaderships and the
    group move once the controller fences it. The coordinator, not any node: the hardest case
    (and the same in every run), since it is also a leader of events partitions."""
    cluster = fault.cluster
    events = fault.worker.topic(names.EVENTS)
    victim = await cluster.coordinator_of(fault.worker.settings.app_id)
    other = next(i for i in cluster.nodes if i != victim)
    leads = [p for p, node in (await cluster.leaders(events)).items() if node == victim]
    fault.notes["node"] = f"{victim} (coordinator, leads events {leads})"
    cluster.pause(victim)
    fault.began = time.time()
    try:
        await asyncio.sleep(PAUSE_S)
        # asked of a node that answers: the paused one is still in the metadata
        isr = await cluster.partitions(events, via=other)
    finally:
        cluster.resume(victim)
    fault.ended = time.time()
    out = [p for p, (_, replicas) in isr.items() if victim not in replicas]
    fault.notes["partitions out of sync"] = len(out)
    assert out, f"node {victim} paused {PAUSE_S}s is still in every ISR: {isr}"


@pytest.mark.parametrize("run", RUNS)
async def test_a_paused_broker_under_load_loses_nothing(
    kafka_cluster: Cluster, tmp_path: Path, run: int
) -> None:
    await under_load(broker_paused, "broker-pause", run, kafka_cluster, tmp_path)


async def redis_restarted(fault: Fault) -> None:
    """Redis killed -9 and started again (empty: no persistence) 10 s later; verdicts must go on
    meanwhile (Redis only holds lookups of them, the topic is the record)."""
    assert fault.redis is not None
    fault.verdicts_during = True
    fault.redis.kill9()
    fault.began = time.time()
    await asyncio.sleep(10)
    fault.redis.restart()
    fault.ended = time.time()


@pytest.mark.parametrize("run", RUNS)
async def test_redis_restarted_under_load_loses_nothing(
    kafka_cluster: Cluster, tmp_path: Path, run: int
) -> None:
    # its own Redis: the session's serves the other tests, and a restart empties it
    redis = launch_redis(tmp_path / "redis", ["--port", "{port}"], "redis://127.0.0.1:{port}/0")
    try:
        fault = await under_load(
            redis_restarted, "redis-restart", run, kafka_cluster, tmp_path, redis
        )
        # the worker writes to the restarted Redis again: the lookups of requests sent after
        # it came back (those sent while it was away are only in the evaluations topic)
        after = [rid for rid, at in fault.sent_at.items() if at > fault.ended + 2]
        client = Redis.from_url(redis.address)
        try:
            keys = [REDIS_EVALUATION_KEY.format(request_id=rid) for rid in after]
            assert after and all(await client.mget(keys)), "no lookups after Redis came back"
        finally:
            await client.aclose()
    finally:
        redis.stop()
