"""Creating every topic tracejudge reads or writes (names in `names.py`), at start.

The broker's auto-creation is never relied on: a topic auto-created with another partition
count than the table changelogs makes Faust crash with PartitionsMismatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidReplicationFactorError, KafkaError, TopicAlreadyExistsError

from tracejudge.models import names
from tracejudge.models.errors import ConfigurationError
from tracejudge.settings import Settings
from tracejudge.streams.kafka.replication import (
    Replication,
    brokers_known,
    config_values,
    fewest_replicas,
    replication_for,
    topic_overrides,
    warn_of_gaps,
)
from tracejudge.streams.kafka.security import check_connection, client_options

log = logging.getLogger(__name__)


# Table changelogs. A compacted changelog keeps a key until its tombstone; with `compact`
# alone, segments roll at 1 GiB or 7 days and only rolled segments are cleaned, so closed
# records stay for long and a restart replays all of history: segments roll hourly.
_COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": str(3_600_000),  # roll hourly, so compaction can reach recent deletes
    "segment.bytes": str(64 * 1024 * 1024),
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": str(3_600_000),  # tombstones themselves go after an hour
}
CHANGELOG_CONFIG = _COMPACTED  # retry-state: small, deleted by tombstones


def changelog_config(settings: Settings, table: str) -> dict[str, str]:
    """The window tables write no tombstones (one per step would double the records, see
    `worker/windows.py`): their changelogs drop records by time. Steps go after the retention
    (an open window's are written again at half of it); closed markers stay longer than any
    step of their window can (retention + one segment + the broker's 5-minute check) and as
    long as late events are counted, so a recovery never finds steps without their marker."""
    if table not in (names.WINDOW_STEPS, names.WINDOW_META):
        return dict(_COMPACTED)
    steps_ms = int(settings.changelog_retention_s * 1000)
    segment_ms = min(3_600_000, steps_ms // 6)
    if table == names.WINDOW_STEPS:
        return {
            "cleanup.policy": "delete",
            "retention.ms": str(steps_ms),
            "segment.ms": str(segment_ms),
            "segment.bytes": str(64 * 1024 * 1024),
        }
    meta_ms = steps_ms + segment_ms + int(settings.closed_retention_s * 1000) + 3_600_000
    # compact as well: a late event's marker replaces the earlier one
    return {**_COMPACTED, "cleanup.policy": "compact,delete", "retention.ms": str(meta_ms)}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: tuple[tuple[str, str], ...] = ()  # a changelog's; others take the broker's defaults


def topic_specs(settings: Settings) -> list[TopicSpec]:
    plain = (*names.INPUTS, *names.OUTPUTS, *names.INTERNAL)
    specs = [TopicSpec(settings.topic(name), settings.partitions) for name in plain]
    specs += [
        TopicSpec(
            names.changelog_topic(settings.app_id, table),
            settings.partitions,
            tuple(changelog_config(settings, table).items()),
        )
        for table in names.TABLES
    ]
    return specs


async def ensure_topics(settings: Settings, timeout_s: float = 30.0) -> list[str]:
    """Create missing topics; raise ConfigurationError on a partition-count mismatch, or on
    a broker that cannot be reached, refuses the credentials or is not trusted."""
    created, _ = await prepare_topics(settings, timeout_s)
    return created


async def prepare_topics(
    settings: Settings, timeout_s: float = 30.0
) -> tuple[list[str], Replication]:
    """`ensure_topics`, and the replication chosen for the topics (Faust's own topics get the
    same factor)."""
    await check_connection(settings)
    admin = AIOKafkaAdminClient(
        **client_options(settings), request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
    except (TimeoutError, KafkaError, OSError) as exc:
        await admin.close()
        raise ConfigurationError(
            f"cannot reach Kafka at {settings.kafka_bootstrap} ({exc!r}); "
            "start a broker or set TRACEJUDGE_KAFKA_BOOTSTRAP"
        ) from exc
    try:
        on_cluster = await _described_topics(admin)
        existing = _counts(on_cluster)
        specs = topic_specs(settings)
        mismatched = [
            (s.name, existing[s.name])
            for s in specs
            if s.name in existing and existing[s.name] != s.partitions
        ]
        if mismatched:
            described = ", ".join(f"{name} has {count}" for name, count in mismatched)
            raise ConfigurationError(
                f"partition mismatch: TRACEJUDGE_PARTITIONS={settings.partitions} but {described}; "
                "set TRACEJUDGE_PARTITIONS to the existing count, or delete those topics "
                "(losing their data), or use a new TRACEJUDGE_TOPIC_PREFIX and TRACEJUDGE_APP_ID"
            )
        alive = [int(b["node_id"]) for b in (await admin.describe_cluster())["brokers"]]
        brokers = brokers_known(alive, on_cluster)
        replication = replication_for(brokers, settings.replication_factor)
        missing = [s for s in specs if s.name not in existing]
        if missing:
            replication = await _create(admin, missing, replication, settings, len(alive))
        present = [s for s in specs if s.name in existing]
        configs = await _topic_configs(admin, [s.name for s in present])
        if configs is not None:
            warn_of_gaps(fewest_replicas(on_cluster), configs, replication)
            wanted = {s.name: dict(s.config) for s in present if s.config}
            await _align_changelog_configs(admin, wanted, configs)
        await seed_group_offsets(settings, settings.topic(names.EVENTS))
        return [s.name for s in missing], replication
    finally:
        await admin.close()


async def _create(
    admin: AIOKafkaAdminClient,
    missing: list[TopicSpec],
    replication: Replication,
    settings: Settings,
    alive: int,
) -> Replication:
    """Create `missing` with `replication`; the replication they were made with.

    Not set by the operator, a factor the cluster refuses (a broker that is down was counted,
    and this cluster places no replica on a broker that is not up) falls back to the brokers
    up now, with a warning naming the gap: the worker starts, and an operator knows what to
    raise."""
    refused = _refused(await _create_topics(admin, missing, replication))
    fewer = replication_for(alive, None)
    if (
        refused
        and refused[1] == InvalidReplicationFactorError.errno
        and settings.replication_factor is None
        and fewer.factor < replication.factor
    ):
        log.warning(
            "Kafka refused %d replicas with %d brokers up (error %s: %s): made the topics with "
            "%d; raise them with kafka-reassign-partitions.sh once every broker is back",
            replication.factor,
            alive,
            *refused[1:],
            fewer.factor,
        )
        replication = fewer
        refused = _refused(await _create_topics(admin, missing, replication))
    if refused:
        # the broker answers a refused topic with an error code, not an exception: a factor
        # above the broker count used to leave the topics missing and the worker failing
        # later, unnamed
        topic, code, message = refused
        raise ConfigurationError(
            f"Kafka refused to create {topic} with {replication.factor} replicas on "
            f"{alive} brokers (error {code}: {message}); set TRACEJUDGE_REPLICATION_FACTOR to "
            "at most the broker count, or leave it unset to follow the cluster"
        )
    log.info(
        "created topics with %d replicas (min.insync.replicas %d, %d brokers up): %s",
        replication.factor,
        replication.min_insync,
        alive,
        ", ".join(s.name for s in missing),
    )
    return replication


async def _create_topics(
    admin: AIOKafkaAdminClient, missing: list[TopicSpec], replication: Replication
) -> Any:
    insync = {"min.insync.replicas": str(replication.min_insync)}
    new = [
        NewTopic(
            s.name, s.partitions, replication.factor, topic_configs={**insync, **dict(s.config)}
        )
        for s in missing
    ]
    try:
        return await admin.create_topics(new)
    except TopicAlreadyExistsError:  # another worker was first
        return None


def _refused(response: Any) -> tuple[str, int, str] | None:
    """The first topic a CreateTopics answer refused (topic, error code, message)."""
    for topic, code, *rest in response.topic_errors if response is not None else ():
        if code and code != TopicAlreadyExistsError.errno:
            return topic, code, rest[0] if rest else ""
    return None


async def seed_group_offsets(settings: Settings, topic: str) -> None:
    """Commit the earliest offset for input partitions the worker group never committed.

    A Faust worker killed before its group's first commit, then restarted, was seen to stall
    after recovery (it resumes fetching before seeking to committed offsets, faust-streaming
    #216): with an offset always committed, it seeks to it. Only possible while the group
    has no live member; otherwise a running worker owns those commits anyway.
    """
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        group_id=settings.app_id,
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        missing = [tp for tp in tps if await consumer.committed(tp) is None]
        if not missing:
            return
        earliest = await consumer.beginning_offsets(missing)
        with contextlib.suppress(KafkaError):
            await consumer.commit({tp: earliest[tp] for tp in missing})
            log.info("seeded offsets of %s for group %s", topic, settings.app_id)
    finally:
        await consumer.stop()


async def _topic_configs(
    admin: AIOKafkaAdminClient, topics: list[str]
) -> dict[str, list[tuple[Any, ...]]] | None:
    """Topic -> its DescribeConfigs entries; None when the broker cannot say (the checks that
    need them are then skipped, said once)."""
    if not topics:
        return {}
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, t, None) for t in topics]
        responses = await admin.describe_configs(resources)
    except Exception as exc:  # e.g. a broker without the config APIs (the embedded one)
        log.warning("cannot read the existing topics' settings: %r", exc)
        return None
    found = {}
    for response in responses:
        for code, message, _type, name, entries, *_ in response.resources:
            if code:  # e.g. a broker that has not heard of a topic made a moment ago
                log.warning("cannot read the settings of %s (error %d: %s)", name, code, message)
            else:
                found[name] = list(entries)
    return found


async def _align_changelog_configs(
    admin: AIOKafkaAdminClient,
    wanted: dict[str, dict[str, str]],
    configs: dict[str, list[tuple[Any, ...]]],
) -> None:
    """Changelogs created by an earlier version (or by Faust) get their cleanup settings. The
    topic's other settings of its own (its min.insync.replicas) are sent along: AlterConfigs
    replaces them all, and would otherwise drop them."""
    stale = {}
    for name, settings in wanted.items():
        current = config_values(configs.get(name, []))
        if name in configs and any(current.get(k) != v for k, v in settings.items()):
            stale[name] = {**topic_overrides(configs[name]), **settings}
    if not stale:
        return
    try:
        altered = await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t, values) for t, values in stale.items()]
        )
    except Exception as exc:
        log.warning("cannot set the changelogs' cleanup settings: %r", exc)
        return
    failed = [r for response in altered for r in response.resources if r[0]]
    if failed:
        log.warning("cannot set the changelogs' cleanup settings: %s", failed)
    else:
        log.info("set cleanup settings of %s", ", ".join(stale))


async def partition_counts(settings: Settings, timeout_s: float = 10.0) -> dict[str, int]:
    """Topic -> partition count, of every topic on the cluster."""
    admin = AIOKafkaAdminClient(
        **client_options(settings), request_timeout_ms=int(timeout_s * 1000)
    )
    await admin.start()
    try:
        return await _partition_counts(admin)
    finally:
        await admin.close()


async def _partition_counts(admin: AIOKafkaAdminClient) -> dict[str, int]:
    return _counts(await _described_topics(admin))


async def _described_topics(admin: AIOKafkaAdminClient) -> list[dict[str, Any]]:
    names = await admin.list_topics()
    if not names:
        return []
    described: list[dict[str, Any]] = await admin.describe_topics(list(names))
    return described


def _counts(described: list[dict[str, Any]]) -> dict[str, int]:
    return {t["topic"]: len(t["partitions"]) for t in described if not t.get("error_code")}
