"""`tracejudge otel` fed by the real OpenTelemetry SDK exporters (gRPC and HTTP): GenAI spans
become contract events, and each trace gets its evaluation from the worker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)

from tests.integration.harness import WorkerProcess, grouped
from tests.realservices import free_port
from tracejudge.streams.otel.receiver import serve
from tracejudge.streams.settings import Settings

pytestmark = pytest.mark.integration


def agent_run(
    exporter: SpanExporter, *, refund_fails: bool, content: bool, remote_parent: bool = False
) -> str:
    """What an instrumented agent emits: invoke_agent > chat, execute_tool x2; with
    `remote_parent`, as an agent behind an instrumented gateway (the caller's span context
    came in a traceparent header)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("test-agent")
    root_attrs: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "support-bot",
    }
    if content:
        root_attrs["gen_ai.input.messages"] = json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "Refund order 7, please"}]}]
        )
        root_attrs["gen_ai.output.messages"] = json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "Refunded 20 EUR."}]}]
        )
    caller = None
    if remote_parent:
        gateway = SpanContext(
            trace_id=random.getrandbits(128),
            span_id=random.getrandbits(64),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        caller = set_span_in_context(NonRecordingSpan(gateway))
    with tracer.start_as_current_span(
        "invoke_agent support-bot", context=caller, attributes=root_attrs
    ) as root:
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 900,
                "gen_ai.usage.output_tokens": 40,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool get_order",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_order"},
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool refund",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund"},
        ) as refund:
            if refund_fails:
                refund.set_status(Status(StatusCode.ERROR, "payment gateway timeout"))
                refund.set_attribute("error.type", "TimeoutError")
        trace_id = format(root.get_span_context().trace_id, "032x")
    provider.force_flush()
    provider.shutdown()
    return f"otel-{trace_id}"


@contextlib.asynccontextmanager
async def receiving(worker: WorkerProcess) -> AsyncIterator[Settings]:
    """`tracejudge otel` for the worker's topics, on free ports, for the length of a test."""
    settings = worker.settings.model_copy(
        update={"otel_grpc_port": free_port(), "otel_http_port": free_port()}
    )
    stop = asyncio.Event()
    server = asyncio.create_task(serve(settings, stop))
    await asyncio.sleep(1.0)  # both listeners up
    try:
        yield settings
    finally:
        stop.set()
        await server


async def test_sdk_spans_over_grpc_and_http_get_one_evaluation_per_trace(
    pipeline_worker: WorkerProcess,
) -> None:
    async with receiving(pipeline_worker) as settings:
        grpc_exporter = GrpcExporter(endpoint=f"127.0.0.1:{settings.otel_grpc_port}", insecure=True)
        http_exporter = HttpExporter(
            endpoint=f"http://127.0.0.1:{settings.otel_http_port}/v1/traces"
        )
        failed = await asyncio.to_thread(agent_run, grpc_exporter, refund_fails=True, content=False)
        ok = await asyncio.to_thread(agent_run, http_exporter, refund_fails=False, content=False)
        evaluations = await grouped(
            pipeline_worker, "evaluations", {failed, ok}, wait_for_all=True, timeout_s=60
        )
    [bad] = evaluations[failed]
    assert bad["closed_by"] == "final_response"
    assert bad["success"] is False
    assert bad["failed_steps"][0]["tool"] == "refund"
    assert "payment gateway timeout" in bad["failed_steps"][0]["reason"]
    [good] = evaluations[ok]
    assert good["success"] is True and good["closed_by"] == "final_response"
    assert good["usage"]["input_tokens"] == 900 and good["usage"]["model_calls"] == 1


async def test_an_agent_behind_a_gateway_closes_on_its_own_root_span(
    pipeline_worker: WorkerProcess,
) -> None:
    async with receiving(pipeline_worker) as settings:
        exporter = HttpExporter(endpoint=f"http://127.0.0.1:{settings.otel_http_port}/v1/traces")
        rid = await asyncio.to_thread(
            agent_run, exporter, refund_fails=False, content=False, remote_parent=True
        )
        evaluations = await grouped(
            pipeline_worker, "evaluations", {rid}, wait_for_all=True, timeout_s=60
        )
    [evaluation] = evaluations[rid]
    # ended by its own root span; without the rule it waits out the idle timeout
    assert evaluation["closed_by"] == "final_response" and evaluation["success"] is True
