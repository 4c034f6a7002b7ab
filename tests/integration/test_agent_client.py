"""tracejudge.client on the real broker: a test agent publishes three requests and awaits their
evaluations (from Redis, and from the topic without Redis); a full queue drops and counts."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.integration.harness import WorkerProcess
from tracejudge.client import AsyncTracer, Tracer

pytestmark = pytest.mark.integration


def agent(tracer: Tracer, n: int) -> list[str]:
    """A small agent: look something up, maybe fail once, answer."""
    rids = []
    for i in range(n):
        with tracer.traced(f"refund order {i}", agent_name="test-agent") as req:
            req.reasoning("look the order up first", phase="plan")
            req.tool_call("get_order", args={"id": i}, success=True, result={"total": 20 + i})
            if i == 1:
                req.tool_call("refund", args={"id": i}, success=False, error="gateway timeout")
            req.tool_call("refund", args={"id": i}, success=True, latency_ms=12.5)
            req.final(f"Refunded order {i}: {20 + i} EUR back to the card.")
        rids.append(req.request_id)
    return rids


def test_a_synchronous_agent_gets_its_three_evaluations(pipeline_worker: WorkerProcess) -> None:
    s = pipeline_worker.settings
    tracer = Tracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix)
    try:
        rids = agent(tracer, 3)
        assert tracer.flush(10)
        assert tracer.sent == 3 * 5 + 1 and tracer.dropped == 0
        evaluations = [tracer.wait_for_evaluation(rid, timeout=30) for rid in rids]
    finally:
        tracer.close()
    assert all(e is not None for e in evaluations)
    assert [e.request_id for e in evaluations if e] == rids
    assert all(e.success and not e.incomplete for e in evaluations if e)  # the retry recovered


async def test_an_async_agent_without_redis_reads_its_verdicts_from_the_topic(
    pipeline_worker: WorkerProcess,
) -> None:
    s = pipeline_worker.settings
    async with AsyncTracer(s.kafka_bootstrap, topic_prefix=s.topic_prefix) as tracer:
        req = tracer.request("summarise the incident", request_id=f"async-{uuid.uuid4().hex[:6]}")
        req.tool_call("read_log", success=True, result="3 errors between 02:00 and 02:05")
        req.final("Three errors from 02:00 to 02:05, all from the cache warm-up job.")
        assert await tracer.flush(10)
        evaluation = await tracer.wait_for_evaluation(req.request_id, timeout=30)
    assert evaluation is not None and evaluation.request_id == req.request_id


async def test_a_full_queue_drops_and_counts_instead_of_blocking(
    pipeline_worker: WorkerProcess,
) -> None:
    s = pipeline_worker.settings
    tracer = AsyncTracer(s.kafka_bootstrap, topic_prefix=s.topic_prefix, queue_size=5)
    # not started: nothing drains the queue, as with a broker that is gone
    started = time.monotonic()
    req = tracer.request("a burst", request_id=f"burst-{uuid.uuid4().hex[:6]}")
    for i in range(20):
        req.tool_call("step", success=True, args={"i": i})
    assert time.monotonic() - started < 0.5  # never waited
    assert tracer.dropped == 16 and req.dropped == 16  # 5 queued of 21 events
    await tracer.start()
    assert await tracer.flush(10)
    assert tracer.sent == 5
    await tracer.close()
    await asyncio.sleep(0)
