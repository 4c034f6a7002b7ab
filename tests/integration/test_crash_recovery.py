"""kill -9 in the middle of a replay loses no request; duplicates keep their evaluation_id."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from tests.integration.harness import (
    WorkerProcess,
    consume,
    key_value_lines,
    produce,
    produce_events,
    refund_request,
    worker_env,
)

pytestmark = pytest.mark.integration


async def test_kill_9_mid_replay_then_restart(
    kafka_bootstrap: str, redis_url: str, tau_events: Path, tmp_path: Path
) -> None:
    worker = WorkerProcess(
        worker_env(kafka_bootstrap, redis_url, tmp_path, "crash"), tmp_path / "worker.log"
    ).start()
    messages = key_value_lines(tau_events)
    expected = {json.loads(v)["request_id"] for _, v in messages if v}
    chunks = [messages[i : i + 250] for i in range(0, len(messages), 250)]
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
        f"killed after {killed_at} evaluations; {duplicates} duplicate evaluations after "
        f"restart; {restarts} more restart(s) after the stall watchdog stopped the worker"
    )


async def test_the_verdict_process_killed_makes_the_worker_exit_and_a_restart_judges_again(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    """The verdicts a dead verdict process owed are not lost: the worker exits 70 without
    acknowledging their records, and the next start judges them."""
    worker = WorkerProcess(
        worker_env(kafka_bootstrap, redis_url, tmp_path, "child"), tmp_path / "worker.log"
    ).start()
    assert worker.process is not None
    first, second = (f"child-{uuid.uuid4().hex[:6]}" for _ in range(2))

    async def judged(rid: str) -> bool:
        records = await consume(
            kafka_bootstrap,
            worker.topic("evaluations"),
            until=lambda rs: any(r.key == rid.encode() for r in rs),
            timeout_s=60,
        )
        return any(r.key == rid.encode() for r in records)

    try:
        await produce_events(kafka_bootstrap, worker.topic("events"), refund_request(first))
        assert await judged(first), worker.tail()  # the verdict process is up and working
        pid = worker.process.pid
        listing = Path(f"/proc/{pid}/task/{pid}/children")
        children = (await asyncio.to_thread(listing.read_text)).split()
        assert len(children) == 1, children  # the verdict process
        os.kill(int(children[0]), signal.SIGKILL)
        await produce_events(kafka_bootstrap, worker.topic("events"), refund_request(second))
        assert await asyncio.to_thread(worker.process.wait, 60) == 70, worker.tail()
        worker.start(timeout_s=180)
        assert await judged(second), worker.tail()
    finally:
        worker.stop()
