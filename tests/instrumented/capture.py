"""What a real instrumentation's OTLP exporter would send, written to a file: each export batch
as one line, the base64 of its `ExportTraceServiceRequest` protobuf (the bytes OTLP/HTTP posts).

Imported by the scripted agents in this folder's subfolders, which run in their own
environments (`scripts/instrumented.sh`), never in the test process: only the OpenTelemetry SDK
and its OTLP encoder are needed here.

    provider = tracer_provider(out_path, service="support-service")
    ... run the instrumented agent ...
    finish(provider)
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

SCENARIOS = ("ok", "tool_fails", "loop", "crash")
TASK = "Refund order 7"
LOOP_CALLS = 6  # identical get_order calls in the `loop` scenario


class FileExporter(SpanExporter):
    """One line per export batch, as the batch processor hands it over."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        data = encode_spans(spans).SerializeToString()
        with open(self.path, "a", encoding="ascii") as out:
            out.write(base64.b64encode(data).decode("ascii") + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def tracer_provider(path: str, service: str = "support-service") -> TracerProvider:
    """A provider exporting as a deployed agent would: the batch processor, its defaults."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(FileExporter(path)))
    return provider


def finish(provider: TracerProvider) -> None:
    provider.force_flush()
    provider.shutdown()
