"""Shared fixtures. Unit tests need nothing; integration fixtures start real services lazily."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.realservices import start_kafka, start_redis
from tests.retried import RETRIES

# 40 labelled tau-bench runs kept in the repository, so a clone runs every test (README there)
TAU_DATA = Path(__file__).resolve().parent / "data" / "tau_airline"


LOOPBACK = {"127.0.0.1", "localhost", "::1"}
INTEGRATION = Path(__file__).resolve().parent / "integration"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # What runs beside real services is marked by where it lives: `-m "not integration"` is the
    # fast tier (scripts/test.sh --fast). Under pytest-xdist (`--dist loadgroup`) an
    # integration module runs in one process, so its module fixtures (a worker, a server) start
    # once; a module may name a wider group (every test on the three-node cluster shares one).
    for item in items:
        if item.path.is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.integration)
            if item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(item.path.stem))


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: hand its retries to the controller
        workeroutput["retries"] = list(RETRIES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    RETRIES.extend(getattr(node, "workeroutput", {}).get("retries", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # a test that passes only on a second try is a bug: the suite retries no test, and says
    # here what else it had to start twice (tests/retried.py)
    if getattr(terminalreporter.config, "workerinput", None) is not None:
        return
    terminalreporter.section("retries")
    if not RETRIES:
        terminalreporter.write_line("none: no service or cluster had to be started twice")
    for line in RETRIES:
        terminalreporter.write_line(f"retried: {line}")


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
