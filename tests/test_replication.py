"""How many replicas the worker gives the topics it creates (issue 41)."""

from __future__ import annotations

import pytest

from tracejudge.streams.kafka.admin import Replication, replication_for
from tracejudge.streams.settings import Settings


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


@pytest.mark.parametrize("text", ["", "auto", "unset"])
def test_an_empty_setting_is_not_set(text: str) -> None:
    assert Settings.model_validate({"replication_factor": text}).replication_factor is None
    assert Settings().replication_factor is None
    assert Settings.model_validate({"replication_factor": "3"}).replication_factor == 3
