"""How many copies tracejudge's topics have, and what the worker says about topics it found.

The worker sets replication only on the topics it creates. Topics made before (by an earlier
version, another tool, or on a smaller cluster) keep theirs, and changing a replica count is a
partition reassignment an operator plans: the worker names such topics in a warning at start,
with what a broker's loss then does to them, and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# DescribeConfigs v1+: where a value comes from; 1 is a topic's own setting
_TOPIC_OVERRIDE = 1


@dataclass(frozen=True)
class Replication:
    factor: int
    min_insync: int


def replication_for(brokers: int, setting: int | None) -> Replication:
    """Replicas of the topics the worker creates, on a cluster of `brokers`.

    Not set, 3 where the cluster has them (fewer: one per broker). With 3 replicas or more,
    `min.insync.replicas` 2: the producers' acks=all then waits for a second copy, and a write
    only the leader held is never acknowledged, so the leader's death loses nothing (topics
    had been made with 1: acks=all meant "the leader has it"). With 2 replicas, 1: 2 would stop
    every write while either broker is down."""
    factor = setting if setting is not None else max(1, min(3, brokers))
    return Replication(factor, 2 if factor >= 3 else 1)


def brokers_known(alive: Iterable[int], described: Iterable[Mapping[str, Any]]) -> int:
    """The brokers a cluster has: the ones its metadata lists, and the ones existing topics keep
    replicas on. The metadata leaves out a broker that is down or fenced (missed heartbeats on a
    loaded host, a rolling restart), and a worker that counted only those made its topics with
    fewer copies for good; KRaft places replicas on a fenced broker too, so it takes them."""
    ids = set(alive)
    for topic in described:
        for partition in topic.get("partitions", ()):
            ids.update(int(r) for r in partition.get("replicas", ()) if int(r) >= 0)
    return len(ids)


@dataclass(frozen=True)
class TopicCopies:
    """An existing topic: its fewest replicas over partitions, and its min.insync.replicas."""

    name: str
    replicas: int
    min_insync: int


def replication_gaps(found: Iterable[TopicCopies], wanted: Replication) -> list[str]:
    """One sentence per kind of gap, naming its topics; empty when every topic is as the
    worker would have made it (or better)."""
    found = sorted(found, key=lambda t: t.name)
    fewer = [t for t in found if t.replicas < wanted.factor]
    # min ISR below 2 with 3 copies or more: acks=all is acknowledged on the leader alone
    lone = [t for t in found if t.replicas >= 3 and t.min_insync < 2]
    # min ISR at the copies: one broker down stops every write to the topic (above: always)
    stuck = [t for t in found if t.min_insync > 1 and t.min_insync >= t.replicas]
    gaps = []
    if fewer:
        gaps.append(
            f"{_listed(fewer)}: fewer replicas than the {wanted.factor} this cluster gives new "
            "topics, so a broker's loss can lose or stop them; raise them with "
            "kafka-reassign-partitions.sh"
        )
    if lone:
        gaps.append(
            f"{_listed(lone)}: min.insync.replicas below 2, so a write acknowledged by the "
            "leader alone is lost if it dies next; set min.insync.replicas=2 with "
            "kafka-configs.sh --alter --add-config"
        )
    if stuck:
        gaps.append(
            f"{_listed(stuck)}: min.insync.replicas not below the replica count, so one broker "
            "down stops every write (above it, every write fails); set it below the replicas"
        )
    return gaps


def warn_of_gaps(
    replicas: dict[str, int], configs: dict[str, list[tuple[Any, ...]]], wanted: Replication
) -> None:
    """Existing topics keep their replication: a gap is named, never changed (see above)."""
    found = []
    for name, entries in configs.items():
        insync = config_values(entries).get("min.insync.replicas")
        if name in replicas and insync is not None and insync.isdigit():
            found.append(TopicCopies(name, replicas[name], int(insync)))
    for gap in replication_gaps(found, wanted):
        log.warning("existing topics: %s", gap)


def _listed(topics: list[TopicCopies]) -> str:
    return ", ".join(
        f"{t.name} ({t.replicas} replica{'' if t.replicas == 1 else 's'}, "
        f"min.insync {t.min_insync})"
        for t in topics
    )


def fewest_replicas(described: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Topic -> its fewest replicas over partitions, from `describe_topics`."""
    return {
        t["topic"]: min((len(p["replicas"]) for p in t["partitions"]), default=0)
        for t in described
        if not t.get("error_code")
    }


def config_values(entries: Iterable[tuple[Any, ...]]) -> dict[str, Any]:
    """Name -> value of a topic's DescribeConfigs entries (name, value, read_only, ...)."""
    return {entry[0]: entry[1] for entry in entries}


def topic_overrides(entries: Iterable[tuple[Any, ...]]) -> dict[str, str]:
    """A topic's own settings among its DescribeConfigs entries (name, value, read_only,
    source, ...). Kafka's AlterConfigs replaces all of them, so a change keeps these."""
    return {
        entry[0]: entry[1]
        for entry in entries
        # v0 answers a bool is_default in that place, never taken for a source
        if entry[1] is not None and not isinstance(entry[3], bool) and entry[3] == _TOPIC_OVERRIDE
    }
