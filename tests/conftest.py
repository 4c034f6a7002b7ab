"""Shared fixtures. Unit tests need nothing; integration fixtures start real services lazily."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.realservices import start_kafka, start_redis

# 40 labelled tau-bench runs kept in the repository, so a clone runs every test (README there)
TAU_DATA = Path(__file__).resolve().parent / "data" / "tau_airline"


LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@pytest.fixture(autouse=True)
def _no_real_model_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests play the model with a loopback server; any other host fails the test."""
    send = httpx.AsyncClient.send

    async def loopback_only(
        self: httpx.AsyncClient, request: httpx.Request, **kw: object
    ) -> object:
        if request.url.host not in LOOPBACK:
            raise AssertionError(f"a test tried to reach a real model: {request.url}")
        return await send(self, request, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx.AsyncClient, "send", loopback_only)


@pytest.fixture
def rules_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the shell exports: no Redis, no judge endpoint unless a test gives one."""
    for name in ("TRACEJUDGE_LLM_BASE_URL", "TRACEJUDGE_LLM_API_KEY", "TRACEJUDGE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRACEJUDGE_REDIS_URL", "")


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
    return TAU_DATA / "events.jsonl"
