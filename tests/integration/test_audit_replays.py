"""The signing audit's findings, replayed as the audit wrote them, on a real broker, Redis and
worker, through the client's public surface (`Tracer`): each was a way to switch signed control
off or to turn it against the agent, and each is now refused or harmless.

- One control record with a non-ASCII signature, or a lone surrogate anywhere in it, killed
  the client's reader thread: every later stop of the process was lost.
- An early-stop decision with such a signature raised into the agent's loop.
- A signed stop captured from a run and published again seconds after the same request id was
  run again (inside the 30 s allowed for clocks apart) stopped the re-run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
import redis

from tests.integration.harness import (
    WorkerProcess,
    consume,
    produce,
    stopping_worker,
    tracer_for,
)
from tests.integration.test_intervention_client import QUIET_S, TOLD_WITHIN_S, step, wait_until
from tracejudge.client import Tracer
from tracejudge.models.names import REDIS_CONTROL_KEY

pytestmark = pytest.mark.integration

KEY = "hmac:audit-1:" + "5ec12e7" * 8  # one entry, the same on the worker and the agent


@pytest.fixture(scope="module")
def signing_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    workdir = tmp_path_factory.mktemp("audit-worker")
    worker = stopping_worker(kafka_bootstrap, redis_url, workdir, "audit", KEY)
    yield worker
    worker.stop()


@pytest.fixture
def tracer(signing_worker: WorkerProcess) -> Iterator[Tracer]:
    tracer = tracer_for(signing_worker, control_keys=KEY)
    yield tracer
    tracer.close()


def poisoned(rid: str) -> list[tuple[bytes, bytes]]:
    """What any producer on the control topic can write, keyed by the victim's request id."""
    stop = {
        "type": "intervention",
        "intervention_id": "forged-1",
        "request_id": rid,
        "kind": "loop",
        "crossed": "repeated_call",
        "evidence": "",
        "action": "stop",
        "message": "stop",
        "ts": time.time(),
    }
    return [
        (rid.encode(), json.dumps({**stop, "signature": "hmac-sha256:" + "é" * 64}).encode()),
        # a lone surrogate, as JSON.stringify escapes it: valid JSON, no valid UTF-8 text
        (rid.encode(), json.dumps({**stop, "message": "\udcff"}).encode()),
    ]


def loop_until_stopped(tracer: Tracer, req: object, limit: int = 6) -> float | None:
    for _ in range(limit):
        step(tracer, req, "run_tests", {"path": "tests/"}, "1 failed: test_cache")  # type: ignore[arg-type]
    return wait_until(req.should_stop, TOLD_WITHIN_S)  # type: ignore[attr-defined]


def test_poisoned_control_records_cost_the_reader_nothing(
    tracer: Tracer, signing_worker: WorkerProcess
) -> None:
    s = signing_worker.settings
    victim = tracer.request("find the flaky test", agent_name="audit-agent")
    asyncio.run(produce(s.kafka_bootstrap, s.topic("control"), poisoned(victim.request_id)))
    time.sleep(QUIET_S)  # read, refused
    assert not victim.should_stop()
    assert tracer._reader is not None and tracer._reader.running
    # the next real stop, for this request and for another, still arrives
    assert loop_until_stopped(tracer, victim) is not None, signing_worker.tail()
    other = tracer.request("find the slow test", agent_name="audit-agent")
    assert loop_until_stopped(tracer, other) is not None, signing_worker.tail()
    assert tracer._reader.running and tracer._reader.restarts == 0


def test_a_poisoned_early_stop_decision_is_no_decision(
    tracer: Tracer, signing_worker: WorkerProcess
) -> None:
    rid = "audit-early-1"
    decision = {
        "type": "early_stop",
        "decision_id": "d1",
        "request_id": rid,
        "iteration": 2,
        "action": "stop",
        "reason": "conclusion",
        "evidence": "",
        "ts": time.time(),
        "signature": "hmac-sha256:" + "ü" * 64,
    }
    client = redis.Redis.from_url(signing_worker.settings.redis_url)
    try:
        client.set(REDIS_CONTROL_KEY.format(request_id=rid), json.dumps(decision))
        assert tracer.early_stop(rid) is None  # it raised TypeError into the agent's loop
    finally:
        client.close()


def test_a_stop_captured_from_a_run_does_not_stop_the_rerun(
    tracer: Tracer, signing_worker: WorkerProcess
) -> None:
    s = signing_worker.settings
    first = tracer.request("find the flaky test", agent_name="audit-agent")
    assert loop_until_stopped(tracer, first) is not None, signing_worker.tail()
    rid = first.request_id
    captured = [
        (r.key, r.value)
        for r in asyncio.run(
            consume(
                s.kafka_bootstrap,
                s.topic("control"),
                until=lambda rs: any(r.key == rid.encode() for r in rs),
                timeout_s=20,
            )
        )
        if r.key == rid.encode()
    ]
    assert captured and json.loads(captured[0][1])["action"] == "stop"
    rerun = tracer.request("find the flaky test", request_id=rid, agent_name="audit-agent")
    assert tracer._reader is not None
    rejected = tracer._reader.rejected
    asyncio.run(produce(s.kafka_bootstrap, s.topic("control"), captured))
    # read and refused: the record is seconds old (within the clocks' allowance), signed
    # with the right key, for this request id, but for the run before
    assert wait_until(lambda: tracer._reader.rejected > rejected, TOLD_WITHIN_S) is not None  # type: ignore[union-attr]
    assert not rerun.should_stop() and rerun.interventions == []
