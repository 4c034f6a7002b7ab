"""Outcome events in, on the real broker: from the client's `outcome` and from `tracejudge
publish`, each on the events topic keyed by its request id (so it reaches the worker that owns
the request's partition)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka.partitioner import murmur2

from tests.integration.harness import WorkerProcess, consume, create_topic, worker_env
from tests.realservices import ROOT
from tracejudge.client import AsyncTracer, Tracer
from tracejudge.models.events import Outcome, parse_event

pytestmark = pytest.mark.integration
PARTITIONS = 3


def _fresh_prefix(kafka_bootstrap: str) -> str:
    prefix = f"outcomes-{uuid.uuid4().hex[:6]}."
    asyncio.run(create_topic(kafka_bootstrap, prefix + "events", PARTITIONS))
    return prefix


def _outcomes(kafka_bootstrap: str, prefix: str, count: int) -> list[tuple[bytes, int, Outcome]]:
    records = asyncio.run(
        consume(
            kafka_bootstrap,
            prefix + "events",
            until=lambda rs: len(rs) >= count,
            timeout_s=30,
            settle_s=1.0,
        )
    )
    found = []
    for r in records:
        event = parse_event(r.value)  # as the worker reads it
        assert isinstance(event, Outcome)
        found.append((r.key, r.partition, event))
    return found


def test_the_clients_outcomes_arrive_keyed_by_their_request(kafka_bootstrap: str) -> None:
    prefix = _fresh_prefix(kafka_bootstrap)
    rids = [f"order-{i}-{uuid.uuid4().hex[:4]}" for i in range(3)]
    tracer = Tracer(kafka_bootstrap, topic_prefix=prefix)
    try:
        assert tracer.outcome(rids[0], ok=True, source="test", note="CI passed: 214 tests")
        assert tracer.outcome(rids[1], score=0.2, source="human")
        assert not tracer.outcome(rids[2], score=4)  # refused here, nothing sent
        assert tracer.flush(15)
        assert tracer.sent == 2 and tracer.dropped == 1
    finally:
        tracer.close()

    async def from_async() -> bool:
        async with AsyncTracer(kafka_bootstrap, topic_prefix=prefix) as tracer:
            sent = tracer.outcome(rids[2], ok=False)  # default source: user
            return sent and await tracer.flush(15)

    assert asyncio.run(from_async())
    found = _outcomes(kafka_bootstrap, prefix, 3)
    assert len(found) == 3
    by_request = {event.request_id: (key, partition, event) for key, partition, event in found}
    assert set(by_request) == set(rids)
    for rid, (key, partition, _) in by_request.items():
        # keyed by the request, on the partition the request's own events take
        assert key == rid.encode() and partition == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
    first, second, third = (by_request[rid][2] for rid in rids)
    assert (first.ok, first.source, first.note) == (True, "test", "CI passed: 214 tests")
    assert (second.ok, second.score, second.source, second.counted_ok) == (
        None,
        0.2,
        "human",
        False,
    )
    assert (third.ok, third.source) == (False, "user") and third.ts is not None


def test_publish_sends_outcome_lines_keyed_by_their_request(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = _fresh_prefix(kafka_bootstrap)
    lines = [
        {"type": "outcome", "request_id": "run-a", "ok": True, "source": "test"},
        {"type": "outcome", "request_id": "run-b", "score": 0.75, "source": "reward"},
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {**os.environ, "TRACEJUDGE_KAFKA_BOOTSTRAP": kafka_bootstrap}
    env["TRACEJUDGE_TOPIC_PREFIX"] = prefix
    result = subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", "publish", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"sent 2 events to {prefix}events" in result.stdout
    found = _outcomes(kafka_bootstrap, prefix, 2)
    assert sorted((key, event.request_id, event.counted_ok) for key, _, event in found) == [
        (b"run-a", "run-a", True),
        (b"run-b", "run-b", True),
    ]


def test_a_worker_with_outcome_keys_takes_only_what_a_named_source_signed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Through the client, the broker and a real worker: the signature made on the dict the
    client sends verifies on the bytes the worker reads; anything else is counted, not taken."""
    key = "ci-" + "0123456789abcdef" * 3
    env = worker_env(kafka_bootstrap, "", tmp_path, "outkeys", outcome_keys=f"test:{key}")
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        s = worker.settings
        with Tracer(s.kafka_bootstrap, topic_prefix=s.topic_prefix, interventions=False) as tracer:
            assert tracer.outcome("o-1", ok=True, source="test", key=key, note="CI: 214 passed ✓")
            assert tracer.outcome("o-2", ok=True, source="test")  # unsigned
            assert tracer.outcome("o-3", ok=False, source="test", key="x" * 40)  # another key
            assert tracer.outcome("o-4", ok=True, source="human", key=key)  # not a named source
            assert tracer.flush(10)
        deadline = time.monotonic() + 60
        while True:
            counters = worker.health()[1]["counters"]
            seen = counters.get("outcomes_received", 0) + counters.get("outcomes_rejected", 0)
            if seen >= 4:
                break
            assert time.monotonic() < deadline, (counters, worker.tail())
            time.sleep(0.5)
        assert counters["outcomes_received"] == 1 and counters["outcomes_rejected"] == 3
    finally:
        worker.stop()
