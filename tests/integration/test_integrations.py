"""The framework integrations with the real frameworks from PyPI, driven by their own fake or
scripted models (no network): the events they produce, and the evaluation a real worker sends
back for them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from tests.integration.harness import WorkerProcess, consume, values
from tracejudge.client import Tracer
from tracejudge.client.integrations.otel import TracejudgeSpanProcessor

pytestmark = pytest.mark.integration


def tracer_for(worker: WorkerProcess) -> Tracer:
    s = worker.settings
    return Tracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix)


async def events_of_request(worker: WorkerProcess, rid: str, count: int) -> list[dict[str, Any]]:
    records = await consume(
        worker.settings.kafka_bootstrap,
        worker.topic("events"),
        until=lambda rs: sum(1 for v in values(rs) if v.get("request_id") == rid) >= count,
        timeout_s=30,
    )
    return [v for v in values(records) if v.get("request_id") == rid]


async def test_an_opentelemetry_instrumented_agent_is_judged_in_process(
    pipeline_worker: WorkerProcess,
) -> None:
    tracer = tracer_for(pipeline_worker)
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-bot"}))
    provider.add_span_processor(TracejudgeSpanProcessor(tracer))
    otel = provider.get_tracer("otel-bot")
    agent = f"otel-bot-{uuid.uuid4().hex[:6]}"
    with otel.start_as_current_span(
        f"invoke_agent {agent}",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent},
    ) as root:
        with otel.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 700,
                "gen_ai.usage.output_tokens": 25,
            },
        ):
            pass
        with otel.start_as_current_span(
            "execute_tool refund",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund"},
        ) as refund:
            refund.set_status(Status(StatusCode.ERROR, "payment gateway timeout"))
    rid = f"otel-{root.get_span_context().trace_id:032x}"
    assert provider.force_flush(10_000)
    kinds = [e["type"] for e in await events_of_request(pipeline_worker, rid, 4)]
    assert sorted(kinds) == ["final_response", "reasoning_step", "task_started", "tool_call"]
    evaluation = tracer.wait_for_evaluation(rid, timeout=30)
    tracer.close()
    assert evaluation is not None and evaluation.closed_by == "final_response"
    assert evaluation.success is False and evaluation.failed_steps[0].tool == "refund"
    assert evaluation.usage is not None and evaluation.usage.input_tokens == 700
    assert evaluation.agent_name == agent
