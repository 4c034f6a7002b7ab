"""Failure modes on the real broker and Redis, seen in Chromium: a tool that starts failing
with one error (its ids varying) makes one mode alert on the modes topic, not one per run,
named in words with example requests; a worker killed and started again keeps its modes; the
explorer's modes page shows the mode, its announcement and, once outcomes come, the share of
its runs that truly failed."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.structs import ConsumerRecord
from selenium.webdriver.common.by import By

from tests.integration.browser import browser, explorer, screenshot, wait_until
from tests.integration.harness import WorkerProcess, consume, tracer_for, worker_env
from tracejudge.client import Tracer
from tracejudge.models import names
from tracejudge.streams.kafka.status import collect_status, render_status

pytestmark = pytest.mark.integration

AGENT = "shop-bot"
FAILING = 8


@pytest.fixture(scope="module")
def modes_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    workdir = tmp_path_factory.mktemp("modes-worker")
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        workdir,
        "modes",
        idle_timeout_s=2,
        modes_window_s=300,
        modes_history_s=900,
        modes_learn_s=0,  # the test's agent is new: nothing to learn first
    )
    worker = WorkerProcess(env, workdir / "worker.log").start()
    yield worker
    worker.stop()


def refund(tracer: Tracer, n: int, fails: bool) -> str:
    with tracer.traced(f"refund order {n}", agent_name=AGENT, agent_version="v7") as req:
        req.tool_call("lookup_order", args={"id": n}, success=True, result="found")
        if fails:
            trace = uuid.uuid4().hex[:12]
            error = f"HTTP 503 Service Unavailable: payments (trace {trace}, order {1000 + n})"
            req.tool_call("refund_order", args={"id": n}, success=False, error=error)
            req.final("Sorry, I could not refund your order right now.")
        else:
            req.tool_call("refund_order", args={"id": n}, success=True, result="refunded")
            req.final(f"Your order {n} is refunded.")
    assert tracer.flush(10)
    return req.request_id


def alerts_of(worker: WorkerProcess, settle_s: float) -> list[ConsumerRecord]:
    return asyncio.run(
        consume(
            worker.settings.kafka_bootstrap,
            worker.topic(names.MODES),
            until=lambda records: len(records) >= 1,
            timeout_s=90,
            settle_s=settle_s,
        )
    )


def test_a_tool_that_starts_failing_makes_one_mode_alert_and_the_modes_page_shows_it(
    modes_worker: WorkerProcess, tmp_path: Path
) -> None:
    tracer = tracer_for(modes_worker)
    try:
        for n in range(3):
            refund(tracer, n, fails=False)
        failing, flushed = [], []
        for n in range(FAILING):
            failing.append(refund(tracer, 100 + n, fails=True))
            flushed.append(time.time())
    finally:
        tracer.close()
    # every failing run is in: one alert for the mode, not one per run (8 runs, 5 make it)
    records = alerts_of(modes_worker, settle_s=8.0)
    alerts = [json.loads(r.value) for r in records]
    assert len(alerts) == 1, (alerts, modes_worker.tail())
    (alert,) = alerts
    assert alert["kind"] == "new" and alert["agent_name"] == AGENT
    assert alert["mode"]["name"] == (
        "refund_order fails with HTTP 503 Service Unavailable: payments (trace <HEX>, order <N>) "
        "after lookup_order"
    )
    assert alert["runs"] >= 5 and set(alert["examples"]) <= set(failing)
    assert alert["versions"] == {"v7": alert["runs"]}
    # announced when its fifth run's verdict was made: within a second or two of that run
    after_fifth = records[0].timestamp / 1000 - flushed[4]
    print(f"mode alert {after_fifth:.2f} s after the fifth failing run was flushed")
    assert after_fifth < 60
    # `tracejudge status` lists it with the agent, what it is and when it was announced
    status = render_status(asyncio.run(collect_status(modes_worker.settings, [])))
    section = status.split("failure modes announced in the last hour", 1)[1]
    assert f"{AGENT}: refund_order fails with HTTP 503" in section and "(new at " in section
    # killed and started again: its modes come back from the table's changelog, so five more
    # runs of the mode within the window announce nothing (a worker that forgot would say
    # "new" again)
    modes_worker.kill9()
    modes_worker.start()
    tracer = tracer_for(modes_worker)
    try:
        more = [refund(tracer, 200 + n, fails=True) for n in range(5)]
    finally:
        tracer.close()
    evaluated = asyncio.run(
        consume(
            modes_worker.settings.kafka_bootstrap,
            modes_worker.topic(names.EVALUATIONS),
            until=lambda rs: {json.loads(r.value)["request_id"] for r in rs} >= set(more),
            timeout_s=90,
        )
    )
    assert {json.loads(r.value)["request_id"] for r in evaluated} >= set(more)
    again = [json.loads(r.value) for r in alerts_of(modes_worker, settle_s=8.0)]
    assert again == alerts, (again, modes_worker.tail())
    # outcomes come in: six of the eight truly failed, two were fine after all
    tracer = tracer_for(modes_worker)
    try:
        for n, rid in enumerate(failing):
            assert tracer.outcome(rid, ok=n >= 6, source="support-desk")
        assert tracer.flush(10)
    finally:
        tracer.close()
    log = tmp_path / "explorer.log"
    with explorer(modes_worker.env, log) as base, browser() as page:

        def shown() -> bool:
            page.get(f"{base}/modes")
            return len(page.find_elements(By.CSS_SELECTOR, "tr.mode-alert")) >= 1

        def joined() -> bool:
            page.get(f"{base}/modes")
            return "6/8 (75%)" in page.find_element(By.ID, "modes").text

        wait_until(shown, 60, lambda: page.page_source)
        wait_until(joined, 60, lambda: page.page_source)  # each mode's share truly failed
        announced = page.find_element(By.ID, "mode-alerts").text
        assert "refund_order fails with HTTP 503" in announced and "new" in announced
        modes = page.find_element(By.ID, "modes").text
        assert f"{FAILING + 5}" in modes and "announced new" in modes and "v7" in modes
        screenshot(page, "modes")
        page.find_element(By.CSS_SELECTOR, "tr.mode a").click()
        runs = page.find_element(By.ID, "mode-runs").text
        assert all(rid in runs for rid in failing)
        # a run's own page names its mode and leads back to it
        page.find_element(By.LINK_TEXT, failing[0]).click()
        page.find_element(By.CSS_SELECTOR, "#mode a").click()
        assert "refund_order fails with HTTP 503" in page.find_element(By.ID, "modes").text
