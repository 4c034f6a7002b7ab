"""tracejudge.client on the real broker: a test agent publishes three requests and awaits their
evaluations (from Redis, and from the topic without Redis); an agent runs through a broker
outage and every event it recorded arrives once."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis
from aiokafka.partitioner import murmur2

from tests.integration.harness import WorkerProcess, consume, create_topic, produce
from tests.realservices import start_kafka
from tests.test_contract_files import with_newer_fields
from tracejudge.client import AsyncTracer, Tracer
from tracejudge.client.events import model_usage
from tracejudge.models.names import REDIS_CONTROL_KEY, REDIS_EVALUATION_KEY
from tracejudge.models.outputs import EarlyStopDecision

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
    tracer = Tracer(  # batches compressed: the worker reads every codec the client may use
        s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix, compression="zstd"
    )
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
        rid = f"async-{uuid.uuid4().hex[:6]}"
        async with tracer.traced("summarise the incident", request_id=rid) as req:
            req.tool_call("read_log", success=True, result="3 errors between 02:00 and 02:05")
            req.final("Three errors from 02:00 to 02:05, all from the cache warm-up job.")
        assert await tracer.flush(10)
        evaluation = await tracer.wait_for_evaluation(req.request_id, timeout=30)
    assert evaluation is not None and evaluation.request_id == req.request_id


def test_an_agent_runs_through_a_broker_outage_and_every_event_arrives_once(
    tmp_path: Path,
) -> None:
    kafka = start_kafka(tmp_path / "kafka", reuse=False)
    prefix = f"outage-{uuid.uuid4().hex[:6]}."
    try:
        asyncio.run(create_topic(kafka.address, prefix + "events", 3))
        kafka.stop()
        tracer = Tracer(kafka.address, topic_prefix=prefix, queue_size=10_000)
        per_event: list[float] = []
        for i in range(1000):  # the broker is down the whole time
            started = time.perf_counter()
            req = tracer.request(f"refund order {i}", agent_name="outage-agent")
            req.tool_call("get_order", success=True, args={"id": i}, result={"total": 20})
            req.reasoning("the order is paid: refund it")
            req.tool_call("refund", success=True, result="ok")
            req.final(f"Refunded order {i}.")
            per_event.append((time.perf_counter() - started) / 5)
        assert tracer.dropped == 0 and tracer.queued == 5000 and tracer.sent == 0
        # never waited on the network (a wait would be a connection timeout: seconds); the
        # speed itself is benchmarks/client.py's to measure
        assert sorted(per_event)[989] < 0.01
        kafka.restart()
        assert tracer.flush(120), f"{tracer.queued} still buffered"
        tracer.close()
        assert tracer.sent == 5000 and tracer.dropped == 0
        records = asyncio.run(
            consume(
                kafka.address,
                prefix + "events",
                until=lambda rs: len(rs) >= 5000,
                timeout_s=60,
                settle_s=2.0,
            )
        )
        ids = [json.loads(r.value)["event_id"] for r in records]
        assert len(ids) == 5000 and len(set(ids)) == 5000  # every one, once
        # on the partition aiokafka and Faust would choose for the key (murmur2)
        assert all(r.partition == (murmur2(r.key) & 0x7FFFFFFF) % 3 for r in records)
    finally:
        kafka.stop()


EXITS_WITHOUT_CLOSE = """
import sys
from tracejudge.client import Tracer
bootstrap, prefix, rid = sys.argv[1:4]
tracer = Tracer(bootstrap, topic_prefix=prefix)
req = tracer.request("look up order 3", request_id=rid)
req.tool_call("get_order", success=True, result="paid")
req.final("Order 3 is paid.")
# no flush, no close: the interpreter's exit delivers what is buffered
"""


def test_events_buffered_at_interpreter_exit_are_delivered(
    pipeline_worker: WorkerProcess, tmp_path: Path
) -> None:
    s = pipeline_worker.settings
    rid = f"atexit-{uuid.uuid4().hex[:6]}"
    script = tmp_path / "agent.py"
    script.write_text(EXITS_WITHOUT_CLOSE)
    done = subprocess.run(
        [sys.executable, str(script), s.kafka_bootstrap, s.topic_prefix, rid],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    with Tracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix) as tracer:
        evaluation = tracer.wait_for_evaluation(rid, timeout=30)
    assert evaluation is not None and evaluation.request_id == rid


def _record_in_child(tracer: Tracer, rid: str) -> None:
    req = tracer.request("look up order 4", request_id=rid)
    req.final("Order 4 is paid.")
    sys.exit(0 if tracer.flush(30) else 1)


def test_a_forked_child_records_with_its_parents_tracer(pipeline_worker: WorkerProcess) -> None:
    s = pipeline_worker.settings
    tracer = Tracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix)
    try:
        parent = tracer.request("before the fork")  # the parent has a live producer
        parent.final("done")
        child_rid = f"fork-{uuid.uuid4().hex[:6]}"
        child = multiprocessing.get_context("fork").Process(
            target=_record_in_child, args=(tracer, child_rid)
        )
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert tracer.flush(10) and tracer.sent == 2  # the child's events are not the parent's
        for rid in (parent.request_id, child_rid):
            evaluation = tracer.wait_for_evaluation(rid, timeout=30)
            assert evaluation is not None and evaluation.request_id == rid
    finally:
        tracer.close()


def test_model_calls_are_summed_in_the_evaluation_and_counted_per_agent(
    pipeline_worker: WorkerProcess,
) -> None:
    s = pipeline_worker.settings
    agent = f"usage-agent-{uuid.uuid4().hex[:6]}"
    with Tracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix) as tracer:
        with tracer.traced("refund order 9", agent_name=agent) as req:
            req.model_call("gpt-4o-mini", input_tokens=900, output_tokens=50, cost_usd=0.0002)
            req.tool_call("refund", args={"id": 9}, success=True)
            req.final("Refunded order 9.", usage=model_usage("gpt-4o-mini", 1000, 30, 0.0001))
        assert tracer.flush(10)
        evaluation = tracer.wait_for_evaluation(req.request_id, timeout=30)
    assert evaluation is not None and evaluation.usage is not None
    usage = evaluation.usage
    assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (2, 1900, 80)
    assert usage.cost_usd == pytest.approx(0.0003) and usage.models == ["gpt-4o-mini"]
    url = f"http://127.0.0.1:{s.web_port}/metrics"
    text = httpx.get(url, timeout=5).text
    assert f'tracejudge_model_tokens_total{{agent="{agent}",kind="input"}} 1900.0' in text
    assert f'tracejudge_model_calls_total{{agent="{agent}"}} 2.0' in text


async def test_a_client_reads_verdicts_from_a_newer_worker_with_added_fields(
    pipeline_worker: WorkerProcess,
) -> None:
    # a consumer on an older client must not lose verdicts when the worker adds a field:
    # from Redis, from the topic (where one it cannot read is skipped) and the early stop
    s = pipeline_worker.settings
    async with AsyncTracer(s.kafka_bootstrap, topic_prefix=s.topic_prefix) as tracer:
        async with tracer.traced("refund order 3") as req:
            req.tool_call("refund", args={"id": 3}, success=True)
            req.final("Refunded order 3: 23 EUR back to the card.")
        assert await tracer.flush(10)
        assert await tracer.wait_for_evaluation(req.request_id, timeout=30) is not None
        redis = aioredis.from_url(s.redis_url)
        try:
            # written once its records are on the topic (and after a short wait for company):
            # the tracer, reading the topic, may see it first
            key = REDIS_EVALUATION_KEY.format(request_id=req.request_id)
            raw = None
            for _ in range(200):  # 10 s at most
                raw = await redis.get(key)
                if raw is not None:
                    break
                await asyncio.sleep(0.05)
            assert raw is not None
            newer_rid = f"newer-{uuid.uuid4().hex[:6]}"
            published = {**json.loads(raw), "request_id": newer_rid}
            newer = json.dumps(with_newer_fields(published)).encode()
            await produce(s.kafka_bootstrap, pipeline_worker.topic("evaluations"), [(None, newer)])
            from_topic = await tracer.wait_for_evaluation(newer_rid, timeout=30)
            await redis.set(REDIS_EVALUATION_KEY.format(request_id=newer_rid), newer)
            decision = EarlyStopDecision(
                decision_id="d", request_id=newer_rid, iteration=2, action="stop",
                reason="conclusion", evidence="CONCLUSION: done", ts=1.0,
            ).model_dump(mode="json")  # fmt: skip
            await redis.set(
                REDIS_CONTROL_KEY.format(request_id=newer_rid),
                json.dumps(with_newer_fields(decision)),
            )
        finally:
            await redis.aclose()
    assert from_topic is not None and from_topic.model_dump(mode="json") == published
    with Tracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix) as synced:
        from_redis = synced.wait_for_evaluation(newer_rid, timeout=10)
        stop = synced.early_stop(newer_rid)
    assert from_redis is not None and from_redis.model_dump(mode="json") == published
    assert stop is not None and stop.model_dump(mode="json") == decision
