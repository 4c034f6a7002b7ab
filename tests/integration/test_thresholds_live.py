"""A team sends 40 outcomes: a real worker on the real broker and Redis calibrates its agent's
alert threshold, and that threshold shows on the worker's /metrics, in `tracejudge status`
(text and --json) and on the explorer's agent page, each within the calibration's refresh
interval; the next verdict of the agent is held to it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.integration.browser import explorer
from tests.integration.harness import (
    WorkerProcess,
    grouped,
    produce_events,
    wait_counter,
    worker_env,
)
from tests.integration.test_metrics import scrape
from tracejudge.judges.agreement.calibration import calibrate_all
from tracejudge.streams.agreement.live import agreement_store

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REFRESH_S = 3.0  # TRACEJUDGE_CALIBRATION_REFRESH_S
OK, FAILED = 30, 10  # the default minimums: 40 outcomes
SLACK_S = 5.0  # polling, a scrape, a status command's start


def run(rid: str, agent: str, good: bool) -> list[dict[str, Any]]:
    """Two calls and an answer; a run that went wrong ends on a failed call."""
    calls = [
        {
            "type": "tool_call",
            "request_id": rid,
            "step_index": i,
            "tool": tool,
            "success": good or i == 1,
            "result_preview": "done" if good or i == 1 else "",
            "error": None if good or i == 1 else "refund service answered 500",
        }
        for i, tool in ((1, "lookup"), (2, "refund"))
    ]
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": rid, "goal": "look up order 7 and refund it"},
        *calls,
        {"type": "final_response", "request_id": rid, "output": "Order 7 was refunded: $12."},
    ]
    return [{**e, "agent_name": agent} for e in events]


def status(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", "status", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def calibrated_on_metrics(worker: WorkerProcess, agent: str) -> tuple[int, int] | None:
    samples = scrape(worker)
    found = [
        v
        for labels, v in samples.get("tracejudge_alert_threshold", [])
        if labels == {"agent": agent, "source": "calibrated"}
    ]
    outcomes = [
        v
        for labels, v in samples.get("tracejudge_alert_threshold_outcomes", [])
        if labels == {"agent": agent}
    ]
    return (int(found[0]), int(outcomes[0])) if found and outcomes else None


async def until_shown(probe: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = await asyncio.to_thread(probe)
        if got or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.2)


def card(base: str, agent: str) -> tuple[str, str] | None:
    address = f"{base}/agents/{urllib.parse.quote(agent)}"
    try:
        with urllib.request.urlopen(address, timeout=5) as resp:
            page = resp.read().decode()
    except OSError:
        return None  # its verdicts not read from the topic yet
    m = re.search(r'id="alert-threshold" data-source="(\w+)">alert threshold <b>(.*?)</b>', page)
    return (m.group(1), m.group(2)) if m and m.group(1) == "calibrated" else None


async def test_forty_outcomes_calibrate_and_show_everywhere_within_the_refresh(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    agent = f"team-{uuid.uuid4().hex[:6]}"
    env = worker_env(
        kafka_bootstrap, redis_url, tmp_path, "thresholds", calibration_refresh_s=REFRESH_S
    )
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        rids = [f"{agent}-{i}" for i in range(OK + FAILED)]
        events = [e for i, rid in enumerate(rids) for e in run(rid, agent, i < OK)]
        await produce_events(kafka_bootstrap, worker.topic("events"), events)
        await grouped(worker, "evaluations", set(rids), wait_for_all=True, timeout_s=120)
        assert calibrated_on_metrics(worker, agent) is None  # configured until the outcomes
        now = time.time()
        outcomes = [
            {"type": "outcome", "request_id": rid, "ok": i < OK, "source": "test", "ts": now}
            for i, rid in enumerate(rids)
        ]
        await produce_events(kafka_bootstrap, worker.topic("events"), outcomes)
        await wait_counter(worker, OK + FAILED, "outcomes_joined", timeout_s=60)
        joined = time.monotonic()

        # /metrics: the worker's own calibration
        shown = await until_shown(lambda: calibrated_on_metrics(worker, agent), 60)
        assert shown is not None, worker.tail()
        assert time.monotonic() - joined <= REFRESH_S + SLACK_S
        threshold, counted = shown
        assert counted == OK + FAILED
        # learned from what Redis holds, by the rule the settings give
        redis = aioredis.from_url(redis_url)
        store = agreement_store(worker.settings, redis)
        assert store is not None
        try:
            tally = await store.tally()
        finally:
            await redis.aclose()
        (learned,) = [
            c
            for c in calibrate_all(tally, worker.settings.calibration_rule(), 0.0)
            if c.agent == agent
        ]
        assert learned.threshold == threshold and threshold != worker.settings.warn_threshold

        # status, text and --json
        text = await asyncio.to_thread(status, env)
        assert f"  {agent}: {threshold}, calibrated from 40 outcomes (30 ok, 10 failed)" in (
            text.stdout
        ), text.stdout + text.stderr
        as_json = json.loads((await asyncio.to_thread(status, env, "--json")).stdout)
        mine = as_json["thresholds"]["agents"][agent]
        assert (mine["threshold"], mine["source"], mine["outcomes"]) == (
            threshold,
            "calibrated",
            40,
        )
        assert mine["calibration_id"] == learned.id
        assert time.monotonic() - joined <= REFRESH_S + 3 * SLACK_S  # two status commands

        # the explorer's agent page (a new explorer: its first read of the tally)
        with explorer(env, tmp_path / "explorer.log") as base:
            started = time.monotonic()
            got = await until_shown(lambda: card(base, agent), 60)
            assert got == ("calibrated", str(threshold))
            assert time.monotonic() - started <= REFRESH_S + SLACK_S

        # and the agent's next verdict is held to it
        await produce_events(
            kafka_bootstrap, worker.topic("events"), run(f"{agent}-next", agent, False)
        )
        found = await grouped(
            worker, "evaluations", {f"{agent}-next"}, wait_for_all=True, timeout_s=60
        )
        (latest,) = found[f"{agent}-next"]
        assert latest["warn_threshold"] == threshold
        assert latest["calibration"]["id"] == learned.id
    finally:
        worker.stop()
