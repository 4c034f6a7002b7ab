"""OpenLLMetry (traceloop-sdk) around a hand-written tool loop on the plain `openai` client.

.venv-instrumented/traceloop/bin/python tests/instrumented/traceloop/agent.py SCENARIO OUTFILE

As OpenLLMetry users write it: `Traceloop.init(...)` once, the run is a function decorated
`@agent(name="support-bot")`, each tool a function decorated `@tool(name=...)`. The model is an
httpx MockTransport answering chat-completions JSON: nothing leaves the process (and a socket
guard below makes any attempt fail loudly).

Traceloop.init builds its own TracerProvider (resource service.name = app_name) around the
exporter it is given, so capture.tracer_provider is not used: the capture FileExporter is passed
as `exporter=`, with the default BatchSpanProcessor (disable_batch=False), and the run ends with
a force_flush + shutdown of that provider (what capture.finish does).

NO_RUN_SPAN=1: the loop is called undecorated (no @agent span); the tools keep @tool.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Content capture and no network, set before traceloop is imported (it reads them at init/call).
os.environ["TRACELOOP_TRACE_CONTENT"] = "true"  # the default; set explicitly
os.environ["TRACELOOP_TELEMETRY"] = "false"  # no telemetry code left in 0.62.4; kept as documented
os.environ["TRACELOOP_METRICS_ENABLED"] = "false"  # else an OTLP metrics exporter to api_endpoint
os.environ["TRACELOOP_LOGGING_ENABLED"] = "false"  # the default; else OTLP logs exporter
os.environ["TRACELOOP_SUPPRESS_WARNINGS"] = "true"


def _no_network(*args: Any, **kwargs: Any) -> Any:
    print(f"NETWORK ACCESS ATTEMPTED: {args!r}", file=sys.stderr)
    raise RuntimeError(f"network access attempted: {args!r}")


socket.socket.connect = _no_network  # type: ignore[method-assign]
socket.socket.connect_ex = _no_network  # type: ignore[method-assign]
socket.create_connection = _no_network  # type: ignore[assignment]
socket.getaddrinfo = _no_network  # type: ignore[assignment]

import capture
import httpx2
import openai
from opentelemetry import trace
from traceloop.sdk import Traceloop
from traceloop.sdk.decorators import agent, tool
from traceloop.sdk.instruments import Instruments

SYSTEM = "You are support-bot, a customer-service agent."
MODEL = "gpt-4o-mini"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "integer"}},
                "required": ["order_id"],
            },
        },
    }
    for name, desc in (("get_order", "Look an order up."), ("refund", "Refund an order."))
]

SCENARIO = "ok"


@tool(name="get_order")
def get_order(order_id: int) -> dict:
    return {"order_id": 7, "amount_eur": 20, "status": "paid"}


@tool(name="refund")
def refund(order_id: int) -> str:
    if SCENARIO == "tool_fails":
        raise RuntimeError("payment gateway timeout")
    return "refunded 20 EUR for order 7"


TOOL_FUNCS = {"get_order": get_order, "refund": refund}


def script(scenario: str) -> list[Any]:
    """The scripted model's answers, in order: ('tool', name) | ('text', answer) | 500."""
    if scenario == "ok":
        return [("tool", "get_order"), ("tool", "refund"), ("text", "Refunded 20 EUR for order 7.")]
    if scenario == "tool_fails":
        return [
            ("tool", "get_order"),
            ("tool", "refund"),
            ("text", "I could not refund order 7: the payment gateway timed out."),
        ]
    if scenario == "loop":
        return [("tool", "get_order")] * capture.LOOP_CALLS + [("text", "I could not tell.")]
    if scenario == "crash":
        return [("tool", "get_order"), 500]
    raise SystemExit(f"unknown scenario {scenario!r}")


def mock_client(scenario: str) -> openai.OpenAI:
    steps = iter(script(scenario))
    n = {"call": 0, "resp": 0}

    def handler(request: httpx2.Request) -> httpx2.Response:
        step = next(steps)
        n["resp"] += 1
        if step == 500:
            return httpx2.Response(
                500,
                json={"error": {"message": "model backend unavailable", "type": "server_error"}},
            )
        kind, value = step
        if kind == "tool":
            n["call"] += 1
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{n['call']}",
                        "type": "function",
                        "function": {"name": value, "arguments": json.dumps({"order_id": 7})},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": value}
            finish = "stop"
        body = {
            "id": f"chatcmpl-{n['resp']}",
            "object": "chat.completion",
            "created": 1700000000 + n["resp"],
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": 50 + 10 * n["resp"],
                "completion_tokens": 12,
                "total_tokens": 62 + 10 * n["resp"],
            },
        }
        return httpx2.Response(200, json=body)

    return openai.OpenAI(
        api_key="test",
        base_url="http://127.0.0.1:9/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


CLIENT: openai.OpenAI | None = None


def run_loop(task: str) -> str:
    """The hand-written loop: model, tools, model, ... until the model answers with text."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task},
    ]
    while True:
        answer = CLIENT.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        msg = answer.choices[0].message
        if not msg.tool_calls:
            return msg.content
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls:
            try:
                # the @tool span records the exception; the loop catches it outside the call
                result = TOOL_FUNCS[call.function.name](**json.loads(call.function.arguments))
                content = result if isinstance(result, str) else json.dumps(result)
            except Exception as exc:
                content = f"Error: {type(exc).__name__}: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})


@agent(name="support-bot")
def support_bot(task: str) -> str:
    return run_loop(task)


def main(scenario: str, out: str) -> None:
    global SCENARIO, CLIENT
    SCENARIO = scenario
    Traceloop.init(
        app_name="support-service",  # becomes resource service.name
        exporter=capture.FileExporter(out),
        disable_batch=False,  # BatchSpanProcessor, as deployed
        telemetry_enabled=False,
        traceloop_sync_enabled=False,  # no prompt-registry Fetcher
        instruments={Instruments.OPENAI},
    )
    CLIENT = mock_client(scenario)
    run = run_loop if os.environ.get("NO_RUN_SPAN") == "1" else support_bot
    try:
        print(run(capture.TASK))
    except Exception as exc:
        print(f"run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    provider = trace.get_tracer_provider()
    provider.force_flush()  # = Traceloop's flush (TracerWrapper.flush) + capture.finish
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
