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


MODEL = "gpt-4o-mini"
MODEL_SERVED = "gpt-4o-mini-2024-07-18"
SYSTEM = "You are support-bot, a customer-service agent."

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "integer"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "refund",
            "description": "Refund an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "integer"}},
                "required": ["order_id"],
            },
        },
    },
]


def get_order(order_id: int) -> dict:
    return {"order_id": 7, "amount_eur": 20, "status": "paid"}


def make_refund(scenario: str):
    def refund(order_id: int) -> str:
        if scenario == "tool_fails":
            raise RuntimeError("payment gateway timeout")
        return "refunded 20 EUR for order 7"

    return refund


# What the scripted model does, turn by turn: a tool name to call (with order_id=7), a final
# text, or 500 (the backend fails).
SCRIPTS = {
    "ok": ["get_order", "refund", "Refunded 20 EUR for order 7."],
    "tool_fails": [
        "get_order",
        "refund",
        "I could not refund order 7: the payment gateway timed out.",
    ],
    "loop": ["get_order"] * capture.LOOP_CALLS + ["I could not tell."],
    "crash": ["get_order", 500],
}


def scripted_model(scenario: str):
    script = list(SCRIPTS[scenario])
    turn = {"n": 0, "calls": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/chat/completions"), request.url
        step = script[turn["n"]]
        turn["n"] += 1
        if step == 500:
            return httpx.Response(
                500,
                json={"error": {"message": "model backend unavailable", "type": "server_error"}},
            )
        usage = {
            "prompt_tokens": 40 + 10 * turn["n"],
            "completion_tokens": 12,
            "total_tokens": 52 + 10 * turn["n"],
        }
        if step in ("get_order", "refund"):
            turn["calls"] += 1
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{turn['calls']}",
                        "type": "function",
                        "function": {"name": step, "arguments": json.dumps({"order_id": 7})},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": step}
            finish = "stop"
        body = {
            "id": f"chatcmpl-{turn['n']}",
            "object": "chat.completion",
            "created": 1700000000 + turn["n"],
            "model": MODEL_SERVED,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": usage,
        }
        return httpx.Response(200, json=body)

    return handler


def run_agent(client, tools: dict) -> str:
    """The hand-written loop: call the model, run its tool calls, repeat until it answers."""
    messages: list[dict] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": capture.TASK},
    ]
    while True:
        response = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                    for call in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            try:
                result = tools[call.function.name](**json.loads(call.function.arguments))
                content = result if isinstance(result, str) else json.dumps(result)
            except Exception as exc:  # the loop hands the error back to the model
                content = f"Error: {type(exc).__name__}: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})


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
        http_client=httpx.Client(transport=httpx.MockTransport(scripted_model(scenario))),
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
