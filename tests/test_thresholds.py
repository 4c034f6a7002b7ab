"""Each agent's alert threshold in use, calibrated or configured, where people look: `tracejudge
status` (text and --json), the explorer's agent page and /metrics."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from tests.memory import MemoryWorker, memory_worker
from tests.test_worker_handlers import final, start, tool
from tracejudge.judges.agreement.calibration import Calibration, CalibrationBook
from tracejudge.judges.agreement.tally import Tally
from tracejudge.models.agents import NO_AGENT
from tracejudge.settings import Settings
from tracejudge.streams.agreement.calibrations import refresher_of
from tracejudge.streams.agreement.report import agreement_json
from tracejudge.streams.agreement.store import MemoryAgreementStore
from tracejudge.streams.agreement.thresholds import alert_thresholds, thresholds_json
from tracejudge.streams.explorer.agreement import AgreementReader
from tracejudge.streams.explorer.server import make_app
from tracejudge.streams.explorer.store import VerdictStore
from tracejudge.streams.kafka.status import Status, render_status
from tracejudge.streams.shared.metrics import MAX_AGENT_LABELS, Metrics

TEAM = "shop-bot"
CLEAN = 93  # what the rules score a clean run of `run` (two calls that succeeded)
BROKEN = 70  # and one whose last call failed


def run(rid: str, last_ok: bool = True, agent: str = TEAM) -> list[dict[str, Any]]:
    events = [start(rid), tool(1, rid=rid), tool(2, ok=last_ok, rid=rid), final(rid)]
    return [{**e, "agent_name": agent} for e in events]


async def send_runs_and_outcomes(w: MemoryWorker, ok: int, failed: int) -> None:
    """`ok` clean runs the team says went well, `failed` broken ones it says went wrong."""
    for i in range(ok + failed):
        rid, good = f"r{i}", i < ok
        for event in run(rid, last_ok=good):
            await w.event(event)
        await w.event({"type": "outcome", "request_id": rid, "ok": good, "source": "test"})


def gauges(exposition: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(exposition.decode())
        for s in family.samples
        if s.name.startswith("tracejudge_alert_threshold")
    }


def status_of(tally: Tally, settings: Settings) -> Status:
    return Status(
        settings.masked(),
        [],
        [],
        agreement_json(tally),
        None,
        None,
        thresholds_json(tally, settings, 0.0),
    )


async def agent_page(
    settings: Settings, store: VerdictStore, reader: AgreementReader, agent: str = TEAM
) -> str:
    client = TestClient(TestServer(make_app(settings, store, reader)))
    await client.start_server()
    try:
        response = await client.get(f"/agents/{agent}")
        assert response.status == 200
        return await response.text()
    finally:
        await client.close()


def threshold_card(page: str) -> tuple[str, str]:
    card = re.search(r'id="alert-threshold" data-source="(\w+)">alert threshold <b>(.*?)</b>', page)
    assert card is not None
    return card.group(1), card.group(2)


async def test_forty_outcomes_show_the_calibrated_threshold_in_status_explorer_and_metrics() -> (
    None
):
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    settings = w.ctx.settings
    assert (settings.calibration_min_ok_runs, settings.calibration_min_failed_runs) == (30, 10)
    await send_runs_and_outcomes(w, ok=30, failed=10)  # 40 outcomes: the minimums, just
    tally = await store.tally()
    # before the worker's refresh: its verdicts, and /metrics, are on the configured threshold
    before = gauges(w.ctx.metrics.exposition())
    assert before[("tracejudge_alert_threshold", (("agent", TEAM), ("source", "configured")))] == 60
    refresher = refresher_of(settings, w.ctx.calibration_book, store)
    assert refresher is not None and refresher.interval_s == settings.calibration_refresh_s
    assert await refresher.refresh()  # what the worker's task does every refresh interval

    # /metrics: the worker's book, the threshold its verdicts use
    after = gauges(w.ctx.metrics.exposition())
    assert after == {
        ("tracejudge_alert_threshold", (("agent", TEAM), ("source", "calibrated"))): CLEAN,
        ("tracejudge_alert_threshold_outcomes", (("agent", TEAM),)): 40,
    }
    for event in run("next", last_ok=False):
        await w.event(event)
    latest = w.channel("evaluations").values()[-1]
    assert latest["overall_score"] == BROKEN and latest["warn_threshold"] == CLEAN
    assert not latest["passed"]  # passed at 60; alerted now

    # status, text and --json: from the same tally, by the same rule
    status = status_of(tally, settings)
    text = render_status(status)
    section = text.split("alert thresholds in use")[1].split("\n\n")[0]
    c = w.ctx.calibration_book.get(TEAM)
    assert c is not None
    assert (
        f"  {TEAM}: {CLEAN}, calibrated from 40 outcomes (30 ok, 10 failed) to alert at most "
        f"5 % of its ok runs (calibration {c.id})"
    ) in section
    assert "agents without outcomes: 60, configured" in section
    assert "warn threshold 60 (agents with a calibration use theirs)" in text
    shown = json.loads(status.to_json())["thresholds"]
    assert shown["configured"] == 60 and shown["refresh_s"] == settings.calibration_refresh_s
    assert shown["agents"][TEAM] == {
        "threshold": CLEAN,
        "source": "calibrated",
        "outcomes": 40,
        "ok_runs": 30,
        "failed_runs": 10,
        "calibration_id": c.id,
        "target": 0.05,
    }

    # the explorer's agent page, with the verdicts it read from the evaluations topic
    verdicts = VerdictStore(capacity=100)
    for evaluation in w.channel("evaluations").values():
        verdicts.add_evaluation(evaluation)
    page = await agent_page(settings, verdicts, AgreementReader(store.tally))
    assert threshold_card(page) == ("calibrated", str(CLEAN))
    note = re.search(r'id="threshold-note">(.*?)</p>', page, re.S)
    assert note is not None
    assert "calibrated from 40 outcomes (30 ok, 10 failed)" in note.group(1)
    assert f"calibration {c.id}" in note.group(1)
    assert f"The latest verdict here was held to {CLEAN}." in note.group(1)


async def test_below_the_minimums_everyone_shows_the_configured_threshold_and_what_is_missing() -> (
    None
):
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    await send_runs_and_outcomes(w, ok=29, failed=10)  # one ok outcome short
    refresher = refresher_of(w.ctx.settings, w.ctx.calibration_book, store)
    assert refresher is not None and await refresher.refresh()
    assert len(w.ctx.calibration_book) == 0
    got = gauges(w.ctx.metrics.exposition())
    assert got == {
        ("tracejudge_alert_threshold", (("agent", TEAM), ("source", "configured"))): 60,
        ("tracejudge_alert_threshold_outcomes", (("agent", TEAM),)): 0,
    }
    tally = await store.tally()
    text = render_status(status_of(tally, w.ctx.settings))
    assert (
        f"  {TEAM}: 60, configured (calibrated once it has 30 ok and 10 failed outcomes; 39 so "
        "far: 29 ok, 10 failed)"
    ) in text
    verdicts = VerdictStore(capacity=100)
    for evaluation in w.channel("evaluations").values():
        verdicts.add_evaluation(evaluation)
    page = await agent_page(w.ctx.settings, verdicts, AgreementReader(store.tally))
    assert threshold_card(page) == ("configured", "60")
    off = Settings(redis_url="", calibration_enabled=False)
    assert f"  {TEAM}: 60, configured (calibration off; outcomes 39 so far" in render_status(
        status_of(tally, off)
    )


def test_status_without_redis_or_when_it_does_not_answer() -> None:
    masked = Settings(redis_url="").masked()
    off = render_status(
        Status(masked, [], [], None, "off: no Redis (TRACEJUDGE_REDIS_URL is empty)")
    )
    assert "  every agent: 60, configured (off: no Redis" in off
    down = render_status(Status(masked, [], [], None, "Redis unreachable: timeout"))
    # the workers may hold calibrations: status does not claim they do not
    assert "  unknown (Redis unreachable: timeout); the configured threshold is 60" in down
    assert "every agent" not in down.split("alert thresholds in use")[1]


async def test_the_explorer_says_so_while_the_outcomes_cannot_be_read() -> None:
    async def failing() -> Tally:
        raise ConnectionError("Redis went away")

    store = VerdictStore(capacity=10)
    store.add_evaluation(
        {"request_id": "r", "agent_name": TEAM, "overall_score": 80, "warn_threshold": 60}
    )
    settings = Settings(redis_url="")
    page = await agent_page(settings, store, AgreementReader(failing))
    assert threshold_card(page) == ("unknown", "?")
    assert "could not be read" in page
    page = await agent_page(settings, store, AgreementReader(None))  # no Redis at all
    assert threshold_card(page) == ("configured", "60")


def test_the_explorer_reads_outcomes_as_often_as_the_workers_learn_thresholds() -> None:
    url = "redis://127.0.0.1:1/0"  # a client is made, nothing connects
    assert AgreementReader.of_settings(Settings(redis_url=url)).every_s == 30  # refresh 60 s
    quick = AgreementReader.of_settings(Settings(redis_url=url, calibration_refresh_s=5))
    assert quick.every_s == 5


def test_metrics_labels_stay_bounded_and_name_a_run_without_agent_as_the_others_do() -> None:
    metrics = Metrics()
    book = CalibrationBook()
    many = [Calibration.of(f"a{i:03}", 70, 0.05, 30 + i, 10, 0.0) for i in range(150)]
    book.replace([*many, Calibration.of(NO_AGENT, 80, 0.05, 500, 10, 0.0)])
    metrics.agents.evaluated("seen-only", 90, True)
    metrics.agents.evaluated(None, 90, True)
    settings = Settings(redis_url="")
    rows = alert_thresholds(book, settings, metrics.agents)
    assert len(rows) == MAX_AGENT_LABELS
    # most outcomes first: the unnamed agent's 510, then a149 down
    assert (rows[0].agent, rows[0].threshold, rows[0].outcomes) == ("(no agent name)", 80, 510)
    assert rows[1].agent == "a149" and all(r.source == "calibrated" for r in rows)
    few = CalibrationBook()
    few.replace(many[:2])
    rows = alert_thresholds(few, settings, metrics.agents)
    assert [(r.agent, r.source, r.threshold) for r in rows] == [
        ("a001", "calibrated", 70),
        ("a000", "calibrated", 70),
        ("(no agent name)", "configured", 60),
        ("seen-only", "configured", 60),
    ]
    off = Settings(redis_url="", calibration_enabled=False, warn_threshold=55)
    assert {(r.source, r.threshold) for r in alert_thresholds(few, off, metrics.agents)} == {
        ("configured", 55)
    }
