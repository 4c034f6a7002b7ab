"""A batch of spans past the receiver's cap: the first ones read, the rest refused, and the
exporter told so in OTLP's own terms (partial success), over HTTP as over gRPC."""

from __future__ import annotations

import os
from typing import Any, cast

from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.test_step_actors import Producer
from tracejudge.settings import Settings
from tracejudge.streams.receiver.receiver import Receiver, http_app


def batch(spans: int) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    trace = os.urandom(16)
    for i in range(spans):
        span = scope.spans.add()
        span.trace_id, span.span_id = trace, os.urandom(8)
        span.name = f"execute_tool lookup_{i}"
        span.start_time_unix_nano, span.end_time_unix_nano = 1_000 + i, 2_000 + i
        attribute = span.attributes.add()
        attribute.key, attribute.value.string_value = "gen_ai.tool.name", f"lookup_{i}"
    return request


async def test_spans_past_the_cap_are_refused_and_the_exporter_told() -> None:
    receiver = Receiver(Settings(redis_url="", otel_max_spans_per_batch=100))
    await receiver.producer.stop()  # never started: the fake publishes
    producer = Producer()
    receiver.producer = cast(Any, producer)
    async with TestClient(TestServer(http_app(receiver))) as client:
        small = await client.post(
            "/v1/traces",
            data=batch(40).SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
        )
        said = ExportTraceServiceResponse.FromString(await small.read())
        assert small.status == 200 and said.partial_success.rejected_spans == 0
        big = await client.post(
            "/v1/traces",
            data=batch(250).SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
        )
        said = ExportTraceServiceResponse.FromString(await big.read())
    assert big.status == 200
    assert said.partial_success.rejected_spans == 150
    assert "cap of 100 spans per batch" in said.partial_success.error_message
    assert (receiver.spans, receiver.rejected_spans) == (140, 150)
