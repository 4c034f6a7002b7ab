"""Hand-written agent loop on the plain `openai` client, traced by OpenLIT (`openlit.init()`).

    .venv-instrumented/openlit/bin/python tests/instrumented/openlit/agent.py SCENARIO OUTFILE

The model is scripted: an httpx MockTransport answering chat-completions JSON, so nothing leaves
the process. The whole run sits in one plain span `support-bot` opened with the provider's tracer,
unless NO_RUN_SPAN=1 (then each model call is its own trace).

OpenLIT has no parameter taking a TracerProvider or exporter: `openlit.init()` reuses the global
TracerProvider when one is set (its docs: "existing OTel providers are auto-detected and reused"),
so ours is made global first. Its OpenAI instrumentor takes `trace.get_tracer(__name__)` from the
global provider. Its other side effects are pinned down so nothing leaves the process:
- pricing: with no `pricing_json` it GETs raw.githubusercontent.com/openlit/openlit/main/assets/pricing.json
  at init; we hand it the local pricing.json beside this script instead;
- metrics: `disable_metrics=True` (else a MeterProvider with a console/OTLP exporter);
- events (OTel log records `gen_ai.client.inference.operation.details`, which carry the messages
  too): a LoggerProvider of ours is made global first, so openlit does not install its console /
  OTLP one; its records are written as JSON lines to OUTFILE + ".events.jsonl" for inspection;
- no OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_*_EXPORTER: removed from the environment before init.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Content capture: OpenLIT's `capture_message_content` defaults to True; its env var is
# OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT ("false" turns it off). Spelled out here, and
# passed to init() below.
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
for _var in (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
):
    os.environ.pop(_var, None)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import capture
import httpx
import openai
import openlit
from handloop import get_order, make_refund, run_agent, scripted_model
from opentelemetry import trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    LogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)


class JsonLinesLogExporter(LogRecordExporter):
    """OpenLIT's events (log records), one JSON object a line, to look at beside the spans."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, batch):
        with open(self.path, "a", encoding="utf-8") as out:
            for item in batch:
                rec = item.log_record
                out.write(
                    json.dumps(
                        {
                            "event_name": rec.event_name,
                            "trace_id": f"{rec.trace_id:032x}" if rec.trace_id else None,
                            "span_id": f"{rec.span_id:016x}" if rec.span_id else None,
                            "body": rec.body,
                            "attributes": dict(rec.attributes or {}),
                        },
                        default=str,
                    )
                    + "\n"
                )
        return LogRecordExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        return None


def main() -> int:
    scenario, out = sys.argv[1], sys.argv[2]
    assert scenario in capture.SCENARIOS, scenario
    provider = capture.tracer_provider(out, service="support-service")
    trace.set_tracer_provider(provider)
    logger_provider = LoggerProvider(resource=provider.resource)
    logger_provider.add_log_record_processor(
        SimpleLogRecordProcessor(JsonLinesLogExporter(out + ".events.jsonl"))
    )
    set_logger_provider(logger_provider)
    openlit.init(
        service_name="support-service",
        capture_message_content=True,
        disable_metrics=True,
        pricing_json=str(HERE / "pricing.json"),
    )

    client = openai.OpenAI(
        api_key="test",
        base_url="http://127.0.0.1:9/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(scripted_model(scenario, httpx))),
    )
    tools = {"get_order": get_order, "refund": make_refund(scenario)}
    error = None
    try:
        if os.environ.get("NO_RUN_SPAN") == "1":
            answer = run_agent(client, tools)
        else:
            with provider.get_tracer("support-bot").start_as_current_span("support-bot"):
                answer = run_agent(client, tools)
        print(answer)
    except Exception as exc:  # after the run span ended (and recorded it)
        error = exc
    capture.finish(provider)
    logger_provider.shutdown()
    if error is not None:
        print(f"run failed: {type(error).__name__}: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
