"""A run's partition moved to another worker and back in the middle of the run, on the real
broker: the per-step check that needs the user's yes reads the yes the other worker handled,
and sends no stop the run did not earn.

Two runs, one on each of the events topic's two partitions. Worker A alone reads both runs up
to the agent's question; worker B joins the group and takes one partition; the user's yes of
both runs arrives (one read by B); B leaves, A takes its partition back, and both runs make the
guarded call. A state kept in A's memory from before the move (as the in-flight checks kept
one) missed the yes B read, and stopped that run."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import WorkerProcess, consume, produce, values, worker_env
from tests.realservices import free_port
from tests.test_run_state import confirm_run as run_events

pytestmark = pytest.mark.integration


def sample(worker: WorkerProcess, name: str, **labels: str) -> float:
    url = f"http://127.0.0.1:{worker.settings.web_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    want = {f'{k}="{v}"' for k, v in labels.items()}
    total = 0.0
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        series, _, rest = head.partition("{")
        if series == name and want <= set(rest.rstrip("}").split(",")) - {""}:
            total += float(value)
    return total


async def until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        await asyncio.sleep(0.2)


async def test_a_partition_moved_and_back_mid_run_never_sends_an_unearned_stop(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    checks = tmp_path / "checks.toml"
    checks.write_text('[default]\nneeds_confirmation = ["cancel_booking"]\n')
    base = worker_env(
        kafka_bootstrap, redis_url, tmp_path, "moved", partitions=2, checks_file=str(checks)
    )
    a, b = (
        WorkerProcess(
            {**base, "TRACEJUDGE_WEB_PORT": str(free_port()),
             "TRACEJUDGE_DATA_DIR": str(tmp_path / name)},
            tmp_path / f"{name}.log",
        )
        for name in ("a", "b")
    )  # fmt: skip
    topic = a.topic("events")
    runs = {0: run_events("moved-p0"), 1: run_events("moved-p1")}

    async def send(steps: slice) -> None:
        await produce(
            kafka_bootstrap,
            topic,
            [
                (e["request_id"].encode(), json.dumps(e).encode(), partition)
                for partition, events in runs.items()
                for e in events[steps]
            ],
        )

    def added(worker: WorkerProcess, kind: str) -> float:
        return sample(worker, "tracejudge_events_total", type=kind, status="added")

    try:
        a.start(timeout_s=180)
        await send(slice(0, 4))  # up to the agent's question, read by A
        await until(lambda: added(a, "reasoning_step") >= 2, 60, "A read both runs' questions")
        revoked = sample(a, "tracejudge_partitions_revoked_total")
        await asyncio.to_thread(b.start, True, 180.0)  # joins: one partition moves to B
        await until(
            lambda: sample(a, "tracejudge_partitions_revoked_total") > revoked,
            60,
            "A gave a partition up",
        )
        await until(lambda: b.health()[0] == 200, 60, "B consuming")
        await send(slice(4, 5))  # the yes of both runs
        await until(
            lambda: added(a, "user_message") + added(b, "user_message") >= 4,
            60,
            "both yeses read",
        )
        assert added(b, "user_message") >= 1, "no partition moved to B"
        revoked = sample(a, "tracejudge_partitions_revoked_total")
        b.stop()  # leaves the group: A takes its partition back
        await until(
            lambda: sample(a, "tracejudge_partitions_revoked_total") > revoked,
            60,
            "A took the partition back",
        )
        await until(lambda: a.health()[0] == 200, 60, "A consuming")
        await send(slice(5, 7))  # the guarded calls, then the answers
        records = await consume(
            kafka_bootstrap,
            a.topic("evaluations"),
            until=lambda rs: {v["request_id"] for v in values(rs)} >= {"moved-p0", "moved-p1"},
            timeout_s=60,
        )
        control = await consume(kafka_bootstrap, a.topic("control"), until=None, settle_s=1.0)
    finally:
        b.stop()
        a.stop()
    told = [v for v in values(control) if v.get("type") == "intervention"]
    assert told == [], (told, a.tail())
    for evaluation in values(records):
        assert not any(f["rule"].startswith("check:") for f in evaluation["findings"]), evaluation
