"""`tracejudge otel` fed by the real OpenTelemetry SDK exporters (gRPC and HTTP): GenAI spans
become contract events, and each trace gets its evaluation from the worker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
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
from pydantic import SecretStr

from tests.instrumentations import batches
from tests.integration.harness import WorkerProcess, grouped
from tests.realservices import free_port
from tracejudge.models.errors import ConfigurationError
from tracejudge.settings import Settings
from tracejudge.streams.receiver.receiver import check_exposure, serve

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
async def receiving(worker: WorkerProcess, **given: Any) -> AsyncIterator[Settings]:
    """`tracejudge otel` for the worker's topics, on free ports, for the length of a test."""
    settings = worker.settings.model_copy(
        update={"otel_grpc_port": free_port(), "otel_http_port": free_port(), **given}
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


TOKEN = "otel-receiver-token-0123456789"


async def test_a_web_page_cannot_post_traces_and_a_token_is_required_when_set(
    pipeline_worker: WorkerProcess,
) -> None:
    """What a page in the operator's browser can send (a `no-cors` post: `text/plain`, with its
    Origin), a name the receiver does not serve (DNS rebinding), and a missing token are
    refused; an exporter with the token gets its trace judged."""
    body = ExportTraceServiceRequest().SerializeToString()
    async with receiving(pipeline_worker, otel_token=SecretStr(TOKEN)) as settings:
        url = f"http://127.0.0.1:{settings.otel_http_port}/v1/traces"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        protobuf = {"Content-Type": "application/x-protobuf", **auth}
        async with aiohttp.ClientSession() as session:

            async def status(headers: dict[str, str]) -> tuple[int, str]:
                async with session.post(url, data=body, headers=headers) as answer:
                    assert answer.headers["X-Content-Type-Options"] == "nosniff"
                    return answer.status, await answer.text()

            assert (await status({**auth, "Content-Type": "text/plain"}))[0] == 415
            page = {**protobuf, "Origin": "https://attacker.example"}
            assert (await status(page))[0] == 403
            assert (await status({**protobuf, "Host": "attacker.example"}))[0] == 421
            assert (await status({"Content-Type": "application/x-protobuf"}))[0] == 401
            assert (await status(protobuf))[0] == 200
        exporter = HttpExporter(endpoint=url, headers={"Authorization": f"Bearer {TOKEN}"})
        rid = await asyncio.to_thread(agent_run, exporter, refund_fails=False, content=False)
        evaluations = await grouped(pipeline_worker, "evaluations", {rid}, timeout_s=60)
        assert evaluations[rid], evaluations
        unauthorised = GrpcExporter(
            endpoint=f"127.0.0.1:{settings.otel_grpc_port}", insecure=True, timeout=5
        )
        lost = await asyncio.to_thread(agent_run, unauthorised, refund_fails=False, content=False)
        none = await grouped(pipeline_worker, "evaluations", {lost}, timeout_s=5)
        assert not none.get(lost)  # refused over gRPC without the token: never published


def test_the_receiver_off_loopback_needs_a_token_that_cannot_be_guessed() -> None:
    settings = Settings(redis_url="", otel_host="0.0.0.0")
    with pytest.raises(ConfigurationError, match="TRACEJUDGE_OTEL_TOKEN"):
        check_exposure(settings)
    with pytest.raises(ConfigurationError, match="placeholder"):
        check_exposure(settings.model_copy(update={"otel_token": SecretStr("change-me")}))
    check_exposure(settings.model_copy(update={"otel_token": SecretStr(TOKEN)}))


async def test_a_real_instrumentations_export_gets_its_verdict_from_a_live_worker(
    pipeline_worker: WorkerProcess,
) -> None:
    """What pydantic-ai's instrumentation exported for a run whose refund failed (recorded from
    the real package, tests/test_instrumentation_shapes.py), posted as its exporter posts it."""
    recorded = batches(
        Path(__file__).parent.parent / "data" / "otel" / "pydantic_ai-v6-tool_fails.b64.gz"
    )
    request = ExportTraceServiceRequest()
    request.ParseFromString(recorded[0])
    rid = f"otel-{request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()}"
    async with receiving(pipeline_worker, otel_capture_content=True) as settings:
        url = f"http://127.0.0.1:{settings.otel_http_port}/v1/traces"
        async with aiohttp.ClientSession() as session:
            for body in recorded:
                headers = {"Content-Type": "application/x-protobuf"}
                async with session.post(url, data=body, headers=headers) as answer:
                    assert answer.status == 200
        evaluations = await grouped(pipeline_worker, "evaluations", {rid}, timeout_s=60)
    [evaluation] = evaluations[rid]
    assert evaluation["agent_name"] == "support-bot" and evaluation["closed_by"] == "final_response"
    assert not evaluation["passed"] and not evaluation["success"]
    assert evaluation["failed_steps"][0]["tool"] == "refund"
    assert "payment gateway timeout" in evaluation["failed_steps"][0]["reason"]
    assert evaluation["usage"]["model_calls"] == 3
