"""kill -9 in the middle of a replay loses no request; duplicates keep their evaluation_id."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.integration.harness import (
    WorkerProcess,
    consume,
    key_value_lines,
    produce,
    worker_env,
)
from tests.soak import runs

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("repeat", runs())  # scripts/soak.sh N: N in a row
async def test_kill_9_mid_replay_then_restart(
    kafka_bootstrap: str, redis_url: str, tau_events: Path, tmp_path: Path, repeat: int
) -> None:
    worker = WorkerProcess(
        worker_env(kafka_bootstrap, redis_url, tmp_path, "crash"), tmp_path / "worker.log"
    ).start()
    messages = key_value_lines(tau_events)
    expected = {json.loads(v)["request_id"] for _, v in messages if v}
    # eight chunks: killed after the fourth, the other four are sent while it is down
    size = -(-len(messages) // 8)
    chunks = [messages[i : i + size] for i in range(0, len(messages), size)]
    killed_at = None
    try:
        for n, chunk in enumerate(chunks):
            await produce(kafka_bootstrap, worker.topic("events"), chunk)
            if killed_at is None and n >= 3:
                deadline = time.monotonic() + 30
                while worker.health()[1].get("counters", {}).get("evaluations", 0) == 0:
                    assert time.monotonic() < deadline, worker.tail()
                    await asyncio.sleep(0.1)
                killed_at = worker.health()[1]["counters"]["evaluations"]
                worker.kill9()  # mid-replay: more chunks follow while it is down
        assert killed_at is not None and 0 < killed_at < len(expected)
        worker.start(timeout_s=180)
        restarts = 0
        for _ in range(6):  # as a supervisor would: a worker the stall watchdog stopped restarts
            records = await consume(
                kafka_bootstrap,
                worker.topic("evaluations"),
                until=lambda rs: {json.loads(r.value)["request_id"] for r in rs} >= expected,
                timeout_s=30,
                settle_s=2.0,
            )
            if {json.loads(r.value)["request_id"] for r in records} >= expected:
                break
            restarts += worker.restart_if_exited()
    finally:
        worker.stop()
    ids: dict[str, set[str]] = defaultdict(set)
    for record in records:
        value = json.loads(record.value)
        ids[value["request_id"]].add(value["evaluation_id"])
    assert set(ids) == expected, f"missing {len(expected - set(ids))} requests"
    assert all(len(v) == 1 for v in ids.values()), "a duplicate carried another evaluation_id"
    duplicates = len(records) - len(expected)
    print(
        f"\nkill -9 mid-replay run {repeat}: killed after {killed_at} evaluations; "
        f"{duplicates} duplicate evaluations after restart; {restarts} more restart(s) after "
        "the stall watchdog stopped the worker"
    )
