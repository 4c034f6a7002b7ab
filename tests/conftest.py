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


# Tests that must share one process under pytest-xdist, by file: a session fixture they all
# use is costly (one three-node cluster for these) and two at once would starve two cores.
SHARED_PROCESS = {
    "tests/integration/test_cluster_faults.py": "kafka-cluster",
    "tests/integration/test_cluster_scaling.py": "kafka-cluster",
}


def work_unit(nodeid: str) -> str:
    """What pytest-xdist hands one process at a time (`--dist loadgroup`): an integration module
    whole, so its module fixtures (a worker, a server) start once; the files of
    SHARED_PROCESS together; a unit test alone."""
    path = nodeid.split("::", 1)[0]
    if path in SHARED_PROCESS:
        return SHARED_PROCESS[path]
    return path if path.startswith("tests/integration/") else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    # pytest-xdist's own loadgroup reads `xdist_group` marks by rewriting node ids, which
    # pytest 9 no longer allows (the marks are then silently ignored): the groups are made here
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # the collection order below: longest units first
    return ByWorkUnit(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # What runs beside real services is marked by where it lives: `-m "not integration"` is the
    # fast tier (scripts/test.sh --fast). The order is the one pytest-xdist hands out work in:
    # the cluster tests first (about a third of the run, one process), then the other
    # integration modules, then the unit tests, short, to even out the end.
    for item in items:
        if item.path.is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.integration)

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return 0 if path in SHARED_PROCESS else 1 if item.path.is_relative_to(INTEGRATION) else 2

    items.sort(key=rank)  # stable: each file's own order is kept


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
