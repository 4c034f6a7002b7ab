"""On the real broker: a worker behind a backlog lingers longer (the gauge says so), and once it
has caught up sends what waited instead of letting it wait out the backlog's linger."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest

from tests.integration.harness import (
    WorkerProcess,
    encode_event,
    grouped,
    produce,
    refund_request,
    worker_env,
)
from tests.integration.test_metrics import scrape, total
from tests.realservices import ROOT

pytestmark = pytest.mark.integration

# far longer than the test: a verdict that waits it out fails the test
BACKLOG_LINGER_MS = 300_000
REQUESTS = 3_000  # 12,000 events on 3 partitions: thousands of records behind at the start
GAUGE = "tracejudge_producer_linger_seconds"


async def test_a_backlog_lingers_longer_and_what_waited_goes_once_caught_up(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        tmp_path,
        "backlog",
        producer_linger_ms=0,
        producer_backlog_linger_ms=BACKLOG_LINGER_MS,
    )
    subprocess.run(  # noqa: ASYNC221 (the topics, before the backlog goes in)
        [sys.executable, "-m", "tracejudge.streams.cli", "topics"],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    worker = WorkerProcess(env, tmp_path / "worker.log")
    rids = {f"backlog-{i}" for i in range(REQUESTS)}
    events = [encode_event(e) for rid in sorted(rids) for e in refund_request(rid)]
    await produce(kafka_bootstrap, worker.topic("events"), events)
    worker.start(wait=False)
    lingers: list[float] = []
    try:
        verdicts = asyncio.ensure_future(
            grouped(worker, "evaluations", rids, wait_for_all=True, timeout_s=120, settle_s=0)
        )
        while not verdicts.done():
            with contextlib.suppress(urllib.error.URLError, ConnectionError):  # not serving yet
                lingers.append(total(await asyncio.to_thread(scrape, worker), GAUGE))
            await asyncio.sleep(0.1)
        got = await verdicts
        assert set(got) == rids, worker.tail()
        # still running: a worker that stopped would have sent what it held on its way out
        assert worker.process is not None and worker.process.poll() is None, worker.tail()
        assert BACKLOG_LINGER_MS / 1000 in lingers, (sorted(set(lingers)), worker.tail())
        deadline = time.monotonic() + 10
        while total(scrape(worker), GAUGE) != 0.0:
            assert time.monotonic() < deadline, worker.tail()
            await asyncio.sleep(0.2)
    finally:
        worker.stop()
