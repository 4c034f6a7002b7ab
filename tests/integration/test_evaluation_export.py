"""Evaluations back in the agent's traces: a worker with TRACEJUDGE_OTEL_EVALUATIONS_ENDPOINT sends
one `gen_ai.evaluation.result` event per evaluation to a real OTLP/HTTP logs endpoint (an aiohttp
server speaking the protocol, on loopback), linked to the request's trace and span."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk.trace import TracerProvider

from tests.integration.harness import WorkerProcess, worker_env
from tests.realservices import free_port
from tracejudge.client import Tracer
from tracejudge.client.integrations.otel import TracejudgeSpanProcessor

pytestmark = pytest.mark.integration


class Collector:
    """An OTLP/HTTP logs endpoint: keeps every log record it is sent, and the headers."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.headers: list[dict[str, str]] = []

    async def logs(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        export = ExportLogsServiceRequest.FromString(await request.read())
        self.headers.append(dict(request.headers))
        for resource in export.resource_logs:
            for scope in resource.scope_logs:
                self.records.extend(scope.log_records)
        return web.Response(status=200)


@contextlib.asynccontextmanager
async def serving_collector() -> AsyncIterator[tuple[Collector, str]]:
    """On the test's own loop (an async fixture would run on another one, idle meanwhile)."""
    found = Collector()
    app = web.Application()
    app.router.add_post("/v1/logs", found.logs)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield found, f"http://127.0.0.1:{port}/v1/logs"
    await runner.cleanup()


def attributes(record: Any) -> dict[str, Any]:
    out = {}
    for kv in record.attributes:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind) if kind else None
    return out


async def test_each_evaluation_is_a_gen_ai_evaluation_result_event_on_its_trace(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    async with serving_collector() as (found, url):
        await exported(kafka_bootstrap, redis_url, tmp_path, found, url)


async def exported(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, found: Collector, url: str
) -> None:
    traced = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    worker = WorkerProcess(
        worker_env(
            kafka_bootstrap,
            redis_url,
            tmp_path,
            "otelexport",
            otel_evaluations_endpoint=url,
            otel_evaluations_headers="x-api-key=s3cret",
        ),
        tmp_path / "worker.log",
    ).start()
    try:
        s = worker.settings

        def agent() -> tuple[str, str, str, str]:
            """Blocking, as agents are: off the loop that serves the collector."""
            tracer = Tracer(s.kafka_bootstrap, topic_prefix=s.topic_prefix)
            given = tracer.request("refund order 3", trace_id=traced[0], span_id=traced[1])
            given.tool_call("refund", success=True)
            given.final("Refunded order 3.")
            plain = tracer.request("look up order 4")  # no OpenTelemetry in this agent
            plain.final("Order 4 is paid.")
            provider = TracerProvider()  # an instrumented agent: ids from its own spans
            provider.add_span_processor(TracejudgeSpanProcessor(tracer))
            with provider.get_tracer("bot").start_as_current_span(
                "invoke_agent bot", attributes={"gen_ai.operation.name": "invoke_agent"}
            ) as root:
                pass
            assert tracer.flush(10)
            tracer.close()
            context = root.get_span_context()
            return (
                given.request_id,
                plain.request_id,
                f"{context.trace_id:032x}",
                f"{context.span_id:016x}",
            )

        given_id, plain_id, otel_trace, otel_span = await asyncio.to_thread(agent)
        wanted = {given_id, plain_id, f"otel-{otel_trace}"}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen = {attributes(r)["tracejudge.request_id"] for r in found.records}
            if wanted <= seen:
                break
            await asyncio.sleep(0.2)
    finally:
        worker.stop()
    by_request = {attributes(r)["tracejudge.request_id"]: r for r in found.records}
    assert wanted <= set(by_request), worker.tail()
    for rid in wanted:  # one each, not one per retry or per output
        assert sum(attributes(r)["tracejudge.request_id"] == rid for r in found.records) == 1
    linked = by_request[given_id]
    assert linked.event_name == "gen_ai.evaluation.result"
    assert (linked.trace_id.hex(), linked.span_id.hex()) == traced
    attrs = attributes(linked)
    assert attrs["gen_ai.evaluation.name"] == "tracejudge"
    assert 0 <= attrs["gen_ai.evaluation.score.value"] <= 100
    assert attrs["gen_ai.evaluation.score.label"] in ("pass", "fail")
    assert attrs["gen_ai.evaluation.explanation"]
    assert by_request[plain_id].trace_id == b""  # nothing to link to
    from_spans = by_request[f"otel-{otel_trace}"]
    assert (from_spans.trace_id.hex(), from_spans.span_id.hex()) == (otel_trace, otel_span)
    assert all(h.get("x-api-key") == "s3cret" for h in found.headers)
