"""Behaviour on the real broker and Redis: verdicts, reflection, alerts, windows."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.integration.harness import WorkerProcess, grouped, produce_events
from tracejudge.streams.demo.samples import sample_traces

pytestmark = pytest.mark.integration


async def evaluations_for(
    worker: WorkerProcess, rids: set[str], settle_s: float = 1.0, timeout_s: float = 60.0
) -> dict[str, list[dict[str, Any]]]:
    return await grouped(
        worker, "evaluations", rids, wait_for_all=True, timeout_s=timeout_s, settle_s=settle_s
    )


async def outputs(worker: WorkerProcess, name: str, rids: set[str]) -> dict[str, list[Any]]:
    return await grouped(worker, name, rids, settle_s=2.0)


async def test_four_cases_idle_timeout_reflections_alerts_and_redis(
    pipeline_worker: WorkerProcess,
) -> None:
    traces = sample_traces(f"cases-{uuid.uuid4().hex[:6]}")
    await produce_events(
        pipeline_worker.settings.kafka_bootstrap,
        pipeline_worker.topic("events"),
        [e for t in traces for e in t.events],
    )
    rids = {t.request_id for t in traces}
    evaluations = await evaluations_for(pipeline_worker, rids, settle_s=1.5)
    reflections = await outputs(pipeline_worker, "reflections", rids)
    alerts = await outputs(pipeline_worker, "alerts", rids)
    redis = aioredis.from_url(pipeline_worker.settings.redis_url)
    for trace in traces:
        [evaluation] = evaluations[trace.request_id]
        assert (evaluation["success"], evaluation["incomplete"]) == (
            trace.expect_success,
            trace.expect_incomplete,
        ), (trace.name, evaluation)
        assert evaluation["closed_by"] == trace.expect_closed_by
        assert evaluation["judge_status"] == "disabled" and evaluation["llm_score"] is None
        assert evaluation["passed"] == (evaluation["overall_score"] >= 60)
        # reflection exactly when incomplete, whatever success says
        expected_reflections = 1 if trace.expect_incomplete else 0
        assert len(reflections[trace.request_id]) == expected_reflections, trace.name
        for reflection in reflections[trace.request_id]:
            assert reflection["reflection_round"] == 1
            assert reflection["evaluation_id"] == evaluation["evaluation_id"]
            assert reflection["goal"] == trace.events[0]["goal"]
            assert reflection["remaining_steps"] == evaluation["remaining_steps"]
        low = [a for a in alerts[trace.request_id] if a["kind"] == "low_score"]
        assert len(low) == (0 if evaluation["passed"] else 1), (trace.name, evaluation)
        stored = await redis.get(f"tracejudge:evaluation:{trace.request_id}")
        assert stored is not None and json.loads(stored) == evaluation
        ttl = await redis.ttl(f"tracejudge:evaluation:{trace.request_id}")
        assert 0 < ttl <= pipeline_worker.settings.evaluation_ttl_s
    await redis.aclose()
    # the two failing cases and the timeout score below the threshold in these samples
    assert sum(1 for rid in rids for a in alerts[rid] if a["kind"] == "low_score") >= 2
    failed = evaluations[traces[2].request_id][0]["failed_steps"]
    assert failed == [{"index": 2, "tool": "refund_payment", "reason": "payment gateway timeout"}]
    left = evaluations[traces[1].request_id][0]["remaining"]
    assert ("planned_step", "send_confirmation_email") in [(x["kind"], x["step"]) for x in left]


async def test_reflection_round_limit(pipeline_worker: WorkerProcess) -> None:
    run = f"rounds-{uuid.uuid4().hex[:6]}"
    at_limit = sample_traces(run + "-r2", reflection_round=2)[1]  # success, steps remain
    below = sample_traces(run + "-r1", reflection_round=1)[1]
    await produce_events(
        pipeline_worker.settings.kafka_bootstrap,
        pipeline_worker.topic("events"),
        at_limit.events + below.events,
    )
    rids = {at_limit.request_id, below.request_id}
    await evaluations_for(pipeline_worker, rids)
    reflections = await outputs(pipeline_worker, "reflections", rids)
    alerts = await outputs(pipeline_worker, "alerts", rids)
    assert reflections[at_limit.request_id] == []
    assert [a["kind"] for a in alerts[at_limit.request_id]].count("reflection_exhausted") == 1
    [reflection] = reflections[below.request_id]
    assert reflection["reflection_round"] == 2
    assert all(a["kind"] != "reflection_exhausted" for a in alerts[below.request_id])


async def test_duplicates_out_of_order_and_late_events(pipeline_worker: WorkerProcess) -> None:
    rid = f"order-{uuid.uuid4().hex[:6]}"
    start = {
        "type": "task_started",
        "request_id": rid,
        "goal": "Look up order 7 and refund it",
        "planned_steps": ["lookup_order", "refund_payment"],
    }
    fail = {
        "type": "tool_call",
        "request_id": rid,
        "step_index": 1,
        "tool": "refund_payment",
        "success": False,
        "error": "HTTP 503",
    }
    lookup = {
        "type": "tool_call",
        "request_id": rid,
        "step_index": 0,
        "tool": "lookup_order",
        "success": True,
        "args_summary": '{"order": 7}',
    }
    redo = {
        "type": "tool_call",
        "request_id": rid,
        "step_index": 2,
        "tool": "refund_payment",
        "success": True,
        "result_preview": "refund R-7 issued",
    }
    final = {
        "type": "final_response",
        "request_id": rid,
        "output": "Order 7 was refunded in full (refund R-7); it reaches your card in 3 days.",
    }
    # the retry arrives before the failure it redoes; everything is sent twice
    arrival: list[dict[str, Any]] = [start, redo, lookup, redo, fail, start, fail, lookup, final]
    await produce_events(
        pipeline_worker.settings.kafka_bootstrap, pipeline_worker.topic("events"), arrival
    )
    [evaluation] = (await evaluations_for(pipeline_worker, {rid}))[rid]
    assert evaluation["step_count"] == 3  # duplicates ignored
    assert evaluation["success"] is True  # ordered by step_index: the failure was redone
    assert evaluation["incomplete"] is False
    _, before = pipeline_worker.health()
    late_before = before["counters"].get("events_late", 0)
    await produce_events(
        pipeline_worker.settings.kafka_bootstrap,
        pipeline_worker.topic("events"),
        [final, {**lookup, "step_index": 9}],
    )
    again = await evaluations_for(pipeline_worker, {rid}, settle_s=2.0)
    assert len(again[rid]) == 1  # a closed request is not re-evaluated
    _, after = pipeline_worker.health()
    assert after["counters"]["events_late"] == late_before + 2


async def test_steps_beyond_the_limit_are_counted_not_kept(pipeline_worker: WorkerProcess) -> None:
    rid = f"long-{uuid.uuid4().hex[:6]}"
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": rid, "goal": "Audit twelve invoices"}
    ]
    for i in range(12):
        events.append(
            {
                "type": "tool_call",
                "request_id": rid,
                "step_index": i,
                "tool": "fetch_invoice" if i < 11 else "archive_invoices",
                "args_summary": f'{{"n": {i}}}',
                "success": i < 11,
                "error": None if i < 11 else "archive is read-only",
            }
        )
    events.append(
        {
            "type": "final_response",
            "request_id": rid,
            "output": "Audited 11 invoices, all totals match; archiving failed.",
        }
    )
    await produce_events(
        pipeline_worker.settings.kafka_bootstrap, pipeline_worker.topic("events"), events
    )
    [evaluation] = (await evaluations_for(pipeline_worker, {rid}))[rid]
    assert evaluation["step_count"] == 12
    assert evaluation["steps_dropped"] == 4  # limit is 8
    # the failure happened among the dropped steps and still counts
    assert evaluation["success"] is False
    assert evaluation["failed_steps"][0]["tool"] == "archive_invoices"
