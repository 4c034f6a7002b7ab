"""A broker that goes away: /health tells, logs stay bounded, no window is closed for it,
SIGTERM still stops the worker, and a long outage makes it exit for its supervisor."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.harness import WorkerProcess, consume, produce_events, worker_env
from tests.realservices import start_kafka

pytestmark = pytest.mark.integration


def wait_for_health(worker: WorkerProcess, code: int, timeout_s: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got, body = worker.health()
        if got == code:
            return body
        time.sleep(0.5)
    raise AssertionError(f"/health never answered {code} in {timeout_s}s:\n{worker.tail()}")


def log_lines(worker: WorkerProcess) -> int:
    return len(worker.log.read_text(errors="replace").splitlines())


def problems(worker: WorkerProcess, skip: int) -> int:
    lines = worker.log.read_text(errors="replace").splitlines()[skip:]
    return sum(1 for line in lines if "ERROR" in line or "WARNING" in line)


async def test_an_outage_longer_than_the_idle_timeout_closes_no_window(tmp_path: Path) -> None:
    kafka = start_kafka(tmp_path / "kafka", reuse=False)
    worker = WorkerProcess(
        worker_env(kafka.address, "", tmp_path, "outage", idle_timeout_s=8),
        tmp_path / "worker.log",
    )
    try:
        worker.start()
        rid = f"outage-{uuid.uuid4().hex[:6]}"
        start = {"type": "task_started", "request_id": rid, "goal": "refund order 5"}
        call = {"type": "tool_call", "request_id": rid, "step_index": 1, "tool": "refund"}
        await produce_events(
            kafka.address, worker.topic("events"), [start, {**call, "success": True}]
        )
        await asyncio.sleep(1)
        kafka.kill9()
        down_at, lines_before = time.monotonic(), log_lines(worker)
        body = wait_for_health(worker, 503, 30)
        assert body["status"] == "broker_unreachable" and body["broker"] == "unreachable"
        assert time.monotonic() - down_at <= 30
        await asyncio.sleep(max(0.0, 25 - (time.monotonic() - down_at)))  # > 3x the idle timeout
        assert problems(worker, lines_before) <= 60, worker.tail(80)
        kafka.restart()
        wait_for_health(worker, 200, 90)
        final = {"type": "final_response", "request_id": rid, "output": "Refunded order 5."}
        await produce_events(kafka.address, worker.topic("events"), [final])
        records = await consume(
            kafka.address,
            worker.topic("evaluations"),
            until=lambda rs: any(json.loads(r.value)["request_id"] == rid for r in rs),
            timeout_s=60,
            settle_s=1.0,
        )
        (evaluation,) = [v for r in records if (v := json.loads(r.value))["request_id"] == rid]
        assert evaluation["closed_by"] == "final_response", worker.tail()
        assert worker.process is not None and worker.starts == 1 and worker.process.poll() is None
    finally:
        worker.stop()
        kafka.stop()


async def test_a_lost_broker_gives_503_then_sigterm_or_the_deadline_stops_the_worker(
    tmp_path: Path,
) -> None:
    kafka = start_kafka(tmp_path / "kafka", reuse=False)
    exiting = WorkerProcess(
        worker_env(kafka.address, "", tmp_path, "gone", broker_down_exit_s=20),
        tmp_path / "exiting.log",
    )
    stopped = WorkerProcess(
        worker_env(kafka.address, "", tmp_path, "term", broker_down_exit_s=600),
        tmp_path / "stopped.log",
    )
    try:
        exiting.start()
        stopped.start()
        kafka.kill9()
        down_at = time.monotonic()
        wait_for_health(stopped, 503, 30)
        assert stopped.process is not None
        stopped.process.send_signal(signal.SIGTERM)
        term_at = time.monotonic()
        stopped.process.wait(timeout=15)
        assert time.monotonic() - term_at <= 10, stopped.tail()
        assert exiting.process is not None
        code = exiting.process.wait(timeout=60)
        assert code == 70, exiting.tail()
        assert 20 <= time.monotonic() - down_at <= 20 + 15, exiting.tail()
        assert "broker unreachable for" in exiting.log.read_text()
    finally:
        exiting.stop()
        stopped.stop()
        kafka.stop()
