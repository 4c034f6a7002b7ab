"""How many replicas the worker gives the topics it creates."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tracejudge.models.errors import ConfigurationError
from tracejudge.settings import Settings
from tracejudge.streams.kafka.admin import TopicSpec, _create
from tracejudge.streams.kafka.replication import (
    Replication,
    TopicCopies,
    brokers_known,
    fewest_replicas,
    replication_for,
    replication_gaps,
    topic_overrides,
)


@pytest.mark.parametrize(
    ("brokers", "expected"),
    [
        (1, Replication(1, 1)),
        (2, Replication(2, 1)),  # min ISR 2 of 2 would stop writes while either is down
        (3, Replication(3, 2)),
        (7, Replication(3, 2)),  # 3 copies are enough however large the cluster
    ],
)
def test_not_set_it_follows_the_cluster(brokers: int, expected: Replication) -> None:
    assert replication_for(brokers, None) == expected


@pytest.mark.parametrize(
    ("brokers", "setting", "expected"),
    [
        (3, 1, Replication(1, 1)),  # the operator's choice wins, even below the cluster's size
        (1, 3, Replication(3, 2)),  # and above it: the broker refuses it, named (not lowered)
        (5, 5, Replication(5, 2)),
    ],
)
def test_a_setting_wins(brokers: int, setting: int, expected: Replication) -> None:
    assert replication_for(brokers, setting) == expected


def test_a_broker_down_is_still_counted_by_the_replicas_it_keeps() -> None:
    """The metadata lists brokers up; a broker fenced a moment (missed heartbeats on a loaded
    host) or restarting still holds replicas of existing topics, and is one of the cluster."""
    described: list[dict[str, Any]] = [
        {"topic": "__consumer_offsets", "partitions": [{"replicas": [1, 2, 3]}]},
        {"topic": "old", "partitions": [{"replicas": [2, 4]}, {"replicas": [-1]}]},
        {"topic": "broken", "error_code": 3},  # no partitions: nothing to count
    ]
    assert brokers_known([1, 2], described) == 4
    assert brokers_known([1, 2, 3], []) == 3  # a new cluster: the metadata is all there is
    assert brokers_known([], []) == 0
    assert replication_for(brokers_known([1, 2], described[:1]), None) == Replication(3, 2)


@pytest.mark.parametrize("text", ["", "auto", "unset"])
def test_an_empty_setting_is_not_set(text: str) -> None:
    assert Settings.model_validate({"replication_factor": text}).replication_factor is None
    assert Settings().replication_factor is None
    assert Settings.model_validate({"replication_factor": "3"}).replication_factor == 3


WANTED = Replication(3, 2)


def test_topics_as_the_worker_makes_them_have_no_gap() -> None:
    found = [TopicCopies("a", 3, 2), TopicCopies("b", 5, 3)]  # more copies than asked: fine
    assert replication_gaps(found, WANTED) == []
    # one broker, one copy: nothing better exists
    assert replication_gaps([TopicCopies("a", 1, 1)], Replication(1, 1)) == []


def test_each_kind_of_gap_is_one_sentence_naming_its_topics() -> None:
    found = [
        TopicCopies("events", 1, 1),
        TopicCopies("alerts", 2, 1),
        TopicCopies("evaluations", 3, 1),
        TopicCopies("changelog", 3, 3),
    ]
    fewer, lone, stuck = replication_gaps(found, WANTED)
    assert fewer.startswith("alerts (2 replicas, min.insync 1), events (1 replica,")
    assert "kafka-reassign-partitions.sh" in fewer
    assert lone.startswith("evaluations (3 replicas, min.insync 1):")
    assert "min.insync.replicas=2" in lone
    assert stuck.startswith("changelog (3 replicas, min.insync 3):")
    assert "one broker down stops every write" in stuck
    # above the copies, every acks=all write fails; a single copy with 1 is all it can be
    (fewer, stuck) = replication_gaps([TopicCopies("t", 1, 2)], WANTED)
    assert stuck.startswith("t (1 replica, min.insync 2)")
    assert replication_gaps([TopicCopies("t", 1, 1)], Replication(1, 1)) == []


def test_a_two_copy_topic_with_two_in_sync_stops_writes_with_one_broker_down() -> None:
    (stuck,) = replication_gaps([TopicCopies("t", 2, 2)], Replication(2, 1))
    assert stuck.startswith("t (2 replicas, min.insync 2)")


def test_the_fewest_replicas_over_partitions_count() -> None:
    described: list[dict[str, Any]] = [
        {"topic": "t", "partitions": [{"replicas": [1, 2, 3]}, {"replicas": [2]}]},
        {"topic": "gone", "error_code": 3, "partitions": []},
    ]
    assert fewest_replicas(described) == {"t": 1}


def test_a_topics_own_settings_are_kept_and_defaults_are_not() -> None:
    # DescribeConfigs v1+ entries: name, value, read_only, source (1: the topic's own), ...
    entries: list[tuple[Any, ...]] = [
        ("min.insync.replicas", "2", False, 1, False, []),
        ("retention.ms", "604800000", False, 5, False, []),  # the broker's default
        ("cleanup.policy", "compact", False, 1, False, []),
        ("secret", None, False, 1, True, []),  # a sensitive value is never answered
    ]
    assert topic_overrides(entries) == {"min.insync.replicas": "2", "cleanup.policy": "compact"}
    # v0 answers is_default (a bool) there: True is not source 1
    assert topic_overrides([("min.insync.replicas", "2", False, True, False)]) == {}


class RefusingAdmin:
    """Kafka's CreateTopics answers as a broker does: an error code per topic, no exception.
    It refuses more replicas than `up` brokers (a cluster placing none on a broker down)."""

    def __init__(self, up: int) -> None:
        self.up = up
        self.asked: list[int] = []

    async def create_topics(self, new: list[Any]) -> Any:
        factor = new[0].replication_factor
        self.asked.append(factor)
        code = 38 if factor > self.up else 0  # INVALID_REPLICATION_FACTOR
        message = f"only {self.up} broker(s) are registered" if code else None
        return SimpleNamespace(topic_errors=[(t.name, code, message) for t in new])


async def test_a_refused_factor_not_set_falls_back_to_the_brokers_up_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin = RefusingAdmin(up=2)
    made = await _create(admin, [TopicSpec("t.events", 2)], Replication(3, 2), Settings(), 2)  # type: ignore[arg-type]
    assert made == Replication(2, 1) and admin.asked == [3, 2]
    assert "Kafka refused 3 replicas with 2 brokers up" in caplog.text
    assert "kafka-reassign-partitions.sh" in caplog.text


async def test_a_refused_factor_the_operator_set_stops_the_worker_named() -> None:
    admin = RefusingAdmin(up=1)
    settings = Settings.model_validate({"replication_factor": "3"})
    with pytest.raises(ConfigurationError, match=r"refused to create t\.events with 3 replicas"):
        await _create(admin, [TopicSpec("t.events", 2)], Replication(3, 2), settings, 1)  # type: ignore[arg-type]
    assert admin.asked == [3]  # not lowered behind the operator's back


async def test_a_topic_refused_for_another_reason_is_not_retried_with_fewer_replicas() -> None:
    class PolicyAdmin(RefusingAdmin):
        async def create_topics(self, new: list[Any]) -> Any:
            self.asked.append(new[0].replication_factor)
            return SimpleNamespace(topic_errors=[(t.name, 44, "policy violation") for t in new])

    admin = PolicyAdmin(up=2)
    with pytest.raises(ConfigurationError, match="error 44: policy violation"):
        await _create(admin, [TopicSpec("t.events", 2)], Replication(3, 2), Settings(), 2)  # type: ignore[arg-type]
    assert admin.asked == [3]
