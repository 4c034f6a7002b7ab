"""A 2 MiB value on the embedded broker (which takes it): dead-lettered as a stub, since no
producer with the usual request size could re-send it; the worker goes on."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest

from tests.integration.harness import WorkerProcess, consume, encode_event, produce, worker_env
from tracejudge.streams.demo.embedded import start_tansu
from tracejudge.streams.demo.samples import sample_traces

pytestmark = pytest.mark.integration


async def test_a_2_mib_value_goes_to_the_dlq_as_a_stub_and_good_requests_are_judged(
    tmp_path: Path,
) -> None:
    broker, bootstrap = start_tansu(tmp_path)
    worker = WorkerProcess(
        worker_env(bootstrap, "", tmp_path, "huge", embedded_broker_timing="true"),
        tmp_path / "worker.log",
    )
    try:
        worker.start(timeout_s=120)
        run = uuid.uuid4().hex[:6]
        key = f"huge-{run}".encode()
        huge = json.dumps({"type": "final_response", "request_id": key.decode(), "output": ""})
        huge_value = huge.encode() + b" " * (2 * 1024 * 1024)  # valid JSON, 2 MiB of padding
        good = sample_traces(f"huge-good-{run}")[0]
        await produce(
            bootstrap,
            worker.topic("events"),
            [(key, huge_value), *map(encode_event, good.events)],
            max_request_size=4 * 1024 * 1024,
        )
        dead = await consume(
            bootstrap, worker.topic("dlq"), until=lambda rs: any(r.key == key for r in rs)
        )
        (stub,) = [r for r in dead if r.key == key]
        headers = dict(stub.headers)
        assert headers["tracejudge-stub"] == b"true"
        assert headers["tracejudge-error-class"] == b"too_large"
        body = json.loads(stub.value)
        assert body["size"] == len(huge_value)
        assert body["sha256"] == hashlib.sha256(huge_value).hexdigest()
        evaluations = await consume(
            bootstrap,
            worker.topic("evaluations"),
            until=lambda rs: any(json.loads(r.value)["request_id"] == good.request_id for r in rs),
        )
        assert any(json.loads(r.value)["request_id"] == good.request_id for r in evaluations)
        assert worker.starts == 1 and worker.process is not None and worker.process.poll() is None
    finally:
        worker.stop()
        broker.stop()
