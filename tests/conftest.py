"""Shared fixtures. Unit tests need nothing; integration fixtures start real services lazily."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realservices import start_kafka, start_redis

SHARED_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "tau_airline"


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    service = start_kafka(tmp_path_factory.mktemp("kafka"))
    yield service.address
    service.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    service = start_redis(tmp_path_factory.mktemp("redis"))
    yield service.address
    service.stop()


@pytest.fixture(scope="session")
def tau_events() -> Path:
    path = SHARED_DATA / "events.jsonl"
    if not path.exists():
        pytest.skip(f"shared tau_airline data not found at {path}")
    return path
