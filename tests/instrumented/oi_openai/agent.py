"""Hand-written agent loop on the plain `openai` client, traced by OpenInference's OpenAI instrumentor.

    .venv-instrumented/oi_openai/bin/python tests/instrumented/oi_openai/agent.py SCENARIO OUTFILE

The model is scripted: an httpx MockTransport answering chat-completions JSON, so nothing leaves
the process. The whole run sits in one plain span `support-bot` opened with the provider's tracer,
unless NO_RUN_SPAN=1 (then each model call is its own trace).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Content capture: OpenInference records messages unless told to hide them (TraceConfig /
# OPENINFERENCE_HIDE_* env vars). Spelled out here so the setting is explicit.
for _var in (
    "OPENINFERENCE_HIDE_INPUTS",
    "OPENINFERENCE_HIDE_OUTPUTS",
    "OPENINFERENCE_HIDE_INPUT_MESSAGES",
    "OPENINFERENCE_HIDE_OUTPUT_MESSAGES",
    "OPENINFERENCE_HIDE_INPUT_TEXT",
    "OPENINFERENCE_HIDE_OUTPUT_TEXT",
    "OPENINFERENCE_HIDE_LLM_TOOLS",
    "OPENINFERENCE_HIDE_LLM_INVOCATION_PARAMETERS",
):
    os.environ.setdefault(_var, "false")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import capture
import httpx2 as httpx
import openai
from openinference.instrumentation.openai import OpenAIInstrumentor

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
    OpenAIInstrumentor().instrument(tracer_provider=provider)

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
    if error is not None:
        print(f"run failed: {type(error).__name__}: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
