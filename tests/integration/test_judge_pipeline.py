"""The LLM judge in the real pipeline: real broker and Redis, scripted model on loopback."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from tests.fake_llm import FakeLLM, data_block, tool_call_reply, verdict
from tests.integration.harness import WorkerProcess, consume, grouped, produce_events, worker_env
from tests.realservices import free_port
from tracejudge.judges.llm.sampling import sampled
from tracejudge.streams.demo.samples import sample_traces

pytestmark = pytest.mark.integration
API_KEY = "sk-test-SECRETSECRETSECRET123456"


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def judge_env(
    kafka: str, redis: str, tmp: Path, name: str, base_url: str, **overrides: Any
) -> dict[str, str]:
    return worker_env(
        kafka,
        redis,
        tmp,
        name,
        llm_judge_enabled="true",
        llm_base_url=base_url,
        llm_api_key=API_KEY,
        llm_model="scripted-judge",
        llm_timeout_s=10,
        **overrides,
    )


def request_id_of(body: dict[str, Any]) -> str:
    return str(json.loads(data_block(body))["request_id"])


async def evaluations(
    worker: WorkerProcess, rids: set[str], timeout_s: float = 90, settle_s: float = 1.0
) -> dict[str, list[dict[str, Any]]]:
    return await grouped(
        worker, "evaluations", rids, wait_for_all=True, timeout_s=timeout_s, settle_s=settle_s
    )


async def topic_values(worker: WorkerProcess, name: str) -> list[dict[str, Any]]:
    records = await consume(
        worker.settings.kafka_bootstrap, worker.topic(name), until=lambda r: False, timeout_s=2.0
    )
    return [json.loads(r.value) for r in records]


async def test_judge_decides_the_four_cases_and_a_replay_costs_no_call(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, fake: FakeLLM
) -> None:
    traces = sample_traces(f"judge-{uuid.uuid4().hex[:6]}")[:4]
    # the judge disagrees with the rules on purpose: its verdicts must win
    decided = {
        traces[0].request_id: (True, True),  # all steps succeeded, but steps remain
        traces[1].request_id: (True, False),
        traces[2].request_id: (False, False),
        traces[3].request_id: (False, True),
    }
    fake.script = lambda body, n: tool_call_reply(verdict(*decided[request_id_of(body)], 70))
    env = judge_env(kafka_bootstrap, redis_url, tmp_path, "judge4", fake.base_url)
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        await produce_events(
            kafka_bootstrap, worker.topic("events"), [e for t in traces for e in t.events]
        )
        found = await evaluations(worker, set(decided))
        reflections = await topic_values(worker, "reflections")
    finally:
        worker.stop()
    assert fake.count() == 4
    for rid, (success, incomplete) in decided.items():
        [evaluation] = found[rid]
        assert evaluation["judge_status"] == "ok" and evaluation["judge_error"] is None
        assert (evaluation["success"], evaluation["incomplete"]) == (success, incomplete)
        assert evaluation["llm_score"] == 70
        assert evaluation["overall_score"] == round(0.6 * evaluation["rule_score"] + 0.4 * 70)
        assert evaluation["dimension_scores"]["correctness"] == 70
        assert "judge-" in evaluation["evaluator_version"]
        reflected = [r for r in reflections if r["request_id"] == rid]
        assert len(reflected) == (1 if incomplete else 0), rid
    assert API_KEY not in (tmp_path / "worker.log").read_text()

    # a replay into a fresh pipeline (same Redis) is answered from the verdict cache
    env2 = judge_env(kafka_bootstrap, redis_url, tmp_path, "judge4-replay", fake.base_url)
    replay = WorkerProcess(env2, tmp_path / "replay.log").start()
    try:
        await produce_events(
            kafka_bootstrap, replay.topic("events"), [e for t in traces for e in t.events]
        )
        again = await evaluations(replay, set(decided))
    finally:
        replay.stop()
    assert fake.count() == 4  # no new call
    for rid in decided:
        first, second = found[rid][0], again[rid][0]
        assert second["judge_status"] == "ok"
        assert (second["success"], second["incomplete"], second["llm_score"]) == (
            first["success"],
            first["incomplete"],
            first["llm_score"],
        )


async def test_throughput_near_concurrency_over_latency_while_rule_windows_keep_closing(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, fake: FakeLLM
) -> None:
    concurrency, hold_s, judged_n, rule_only_n = 4, 0.5, 32, 8
    run = uuid.uuid4().hex[:6]
    judged: list[str] = []
    rule_only: list[str] = []
    i = 0
    while len(judged) < judged_n or len(rule_only) < rule_only_n:
        rid = f"tp-{run}-{i}"
        i += 1
        bucket = judged if sampled(rid, 0.5) else rule_only
        if len(bucket) < (judged_n if bucket is judged else rule_only_n):
            bucket.append(rid)
    fake.script = lambda body, n: tool_call_reply(verdict(True, False), delay_s=hold_s)
    env = judge_env(
        kafka_bootstrap,
        redis_url,
        tmp_path,
        "tput",
        fake.base_url,
        llm_concurrency=concurrency,
        llm_sample_rate=0.5,
    )
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    template = sample_traces("x")[0].events

    def events_of(rid: str) -> list[dict[str, Any]]:
        return [{**e, "request_id": rid} for e in template]

    arrival: dict[str, float] = {}  # final verdicts
    first: dict[str, float] = {}  # any verdict: a judged request's pending one first
    try:
        consumer = AIOKafkaConsumer(
            worker.topic("evaluations"),
            bootstrap_servers=kafka_bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            # judged requests first, the rule-only ones after: they must not queue behind
            order = judged + rule_only
            started = time.monotonic()
            await produce_events(
                kafka_bootstrap,
                worker.topic("events"),
                [e for rid in order for e in events_of(rid)],
            )
            published = time.monotonic()
            deadline = published + 120
            statuses: dict[str, str] = {}
            while len(arrival) < len(order) and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for r in records:
                        value = json.loads(r.value)
                        first.setdefault(value["request_id"], time.monotonic())
                        if value.get("final") is False:
                            continue  # the rules' verdict at close: the judge's comes after
                        arrival.setdefault(value["request_id"], time.monotonic())
                        statuses[value["request_id"]] = value["judge_status"]
        finally:
            await consumer.stop()
    finally:
        worker.stop()
    assert set(arrival) == set(judged) | set(rule_only)
    assert all(statuses[rid] == "ok" for rid in judged)
    assert all(statuses[rid] == "skipped" for rid in rule_only)
    first_call = started
    elapsed = max(arrival[r] for r in judged) - first_call
    throughput = judged_n / elapsed
    ideal = concurrency / hold_s
    ratio = throughput / ideal
    rule_latest = max(arrival[r] - published for r in rule_only)
    judged_median = statistics.median(arrival[r] - published for r in judged)
    print(
        f"\njudged: {judged_n} in {elapsed:.2f}s = {throughput:.2f}/s, ideal {ideal:.1f}/s, "
        f"ratio {ratio:.2f}; max in flight {fake.max_in_flight}; rule-only verdicts all in "
        f"{rule_latest:.2f}s, judged median {judged_median:.2f}s"
    )
    assert fake.max_in_flight == concurrency  # bounded, and used
    assert ratio >= 0.6
    assert rule_latest < judged_median  # rule-only windows did not wait for the judge
    # nor did the judged requests wait for it for a verdict: the rules' came at close
    assert max(first[r] - published for r in judged) < judged_median


@pytest.mark.parametrize("victim", ["worker", "tracejudge judge"])
async def test_worker_killed_with_calls_in_flight_loses_no_request(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, fake: FakeLLM, victim: str
) -> None:
    """kill -9 of the worker that judges, or of a `tracejudge judge` process beside a worker
    that does not: the jobs in flight are judged after the restart, each request once under
    one evaluation_id."""
    fake.script = lambda body, n: tool_call_reply(verdict(True, False), delay_s=2.0)
    apart = victim == "tracejudge judge"
    env = judge_env(
        kafka_bootstrap,
        redis_url,
        tmp_path,
        "judgekill",
        fake.base_url,
        llm_concurrency=4,
        worker_judges=str(not apart).lower(),
    )
    windows = WorkerProcess(env, tmp_path / "worker.log").start()
    judge_env_ = {**env, "TRACEJUDGE_WEB_PORT": str(free_port())}
    judges = WorkerProcess(judge_env_, tmp_path / "judge.log", command="judge")
    worker = judges.start() if apart else windows
    run = uuid.uuid4().hex[:6]
    template = sample_traces("x")[0].events
    rids = {f"kill-{run}-{i}" for i in range(12)}
    try:
        await produce_events(
            kafka_bootstrap,
            worker.topic("events"),
            [{**e, "request_id": rid} for rid in sorted(rids) for e in template],
        )
        deadline = time.monotonic() + 60
        while fake.in_flight < 4:
            assert time.monotonic() < deadline, worker.tail()
            await asyncio.sleep(0.05)
        worker.kill9()  # four calls in flight, the rest queued
        calls_before = fake.count()
        worker.start()
        restarts = 0
        for _ in range(6):  # as a supervisor would, restart a worker that exited
            found = await evaluations(worker, rids, timeout_s=25, settle_s=2.0)
            if all(found.values()):
                break
            restarts += worker.restart_if_exited()
    finally:
        windows.stop()
        judges.stop()
    assert all(found[rid] for rid in rids), [r for r in rids if not found[r]]
    for rid in rids:
        assert len({e["evaluation_id"] for e in found[rid]}) == 1
        assert {e["judge_status"] for e in found[rid]} == {"ok"}
    print(
        f"\n{calls_before} calls before the kill, {fake.count()} in all; "
        f"{sum(len(v) for v in found.values()) - len(rids)} duplicate evaluations, "
        f"{restarts} restart(s) after the stall watchdog stopped the worker"
    )


async def test_judge_down_falls_back_to_rules_with_one_alert(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    down = f"http://127.0.0.1:{free_port()}/v1"
    env = judge_env(
        kafka_bootstrap,
        redis_url,
        tmp_path,
        "judgedown",
        down,
        llm_max_attempts=1,
        llm_breaker_failures=3,
        llm_alert_min_requests=4,
        llm_alert_fallback_rate=0.5,
    )
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    traces = sample_traces(f"down-{uuid.uuid4().hex[:6]}")[:4]
    traces += sample_traces(f"down2-{uuid.uuid4().hex[:6]}")[:4]
    try:
        await produce_events(
            kafka_bootstrap, worker.topic("events"), [e for t in traces for e in t.events]
        )
        found = await evaluations(worker, {t.request_id for t in traces})
        alerts = await topic_values(worker, "alerts")
    finally:
        worker.stop()
    for trace in traces:
        [evaluation] = found[trace.request_id]
        assert evaluation["judge_status"] == "fallback"
        assert evaluation["judge_error"] in {"connect", "circuit_open"}
        assert evaluation["overall_score"] == evaluation["rule_score"]
        assert evaluation["llm_score"] is None
        assert (evaluation["success"], evaluation["incomplete"]) == (
            trace.expect_success,
            trace.expect_incomplete,
        )
    errors = [found[t.request_id][0]["judge_error"] for t in traces]
    assert "circuit_open" in errors  # the breaker stopped calling a dead server
    unavailable = [a for a in alerts if a["kind"] == "judge_unavailable"]
    assert len(unavailable) == 1, alerts


async def test_an_agent_waiting_for_its_verdict_gets_the_judges_and_the_rules_one_meanwhile(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, fake: FakeLLM
) -> None:
    import redis.asyncio as aioredis

    from tracejudge.client import AsyncTracer
    from tracejudge.models.names import REDIS_EVALUATION_KEY

    # the judge finds undone what the rules call done, after a while
    fake.script = lambda body, n: tool_call_reply(verdict(True, True, 30), delay_s=3.0)
    worker = WorkerProcess(
        judge_env(kafka_bootstrap, redis_url, tmp_path, "pending", fake.base_url),
        tmp_path / "worker.log",
    ).start()
    s = worker.settings
    tracer = AsyncTracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix)
    from_topic = AsyncTracer(s.kafka_bootstrap, topic_prefix=s.topic_prefix)  # no Redis
    redis = aioredis.from_url(redis_url)
    try:
        async with tracer.traced("refund order 7", agent_name="waiting-agent") as req:
            req.tool_call("refund", args={"id": 7}, success=True)
            req.final("Refunded order 7: 20 EUR back to the card.")
        key = REDIS_EVALUATION_KEY.format(request_id=req.request_id)
        for _ in range(600):  # up to 30 s
            if await redis.get(key):
                break
            await asyncio.sleep(0.05)
        # the rules' verdict is there while the judge still thinks: a short wait gets it
        meanwhile = await tracer.wait_for_evaluation(req.request_id, timeout=0.3)
        assert meanwhile is not None and not meanwhile.final
        assert (meanwhile.judge_status, meanwhile.incomplete) == ("skipped", False)
        # a longer wait gets the judge's, from Redis and from the topic alike
        final = await tracer.wait_for_evaluation(req.request_id, timeout=30)
        topic_final = await from_topic.wait_for_evaluation(req.request_id, timeout=30)
    finally:
        await redis.aclose()
        await tracer.close()
        await from_topic.close()
        worker.stop()
    for got in (final, topic_final):
        assert got is not None and got.final and got.judge_status == "ok" and got.incomplete
        assert got.evaluation_id == meanwhile.evaluation_id
