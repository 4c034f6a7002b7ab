"""The hand-written agent loop several families share: a plain `openai` client in a loop that
runs the tools itself (no span per tool), and the scripted model answering it through an HTTP
mock transport, so nothing leaves the process. Imported by those families' agent.py, which run
in their own environments."""

from __future__ import annotations

import json
from typing import Any

import capture

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


def scripted_model(scenario: str, httpx: Any) -> Any:
    """`httpx`: the HTTP library the installed openai client is built on (httpx, or httpx2
    for openai 3)."""
    script = list(SCRIPTS[scenario])
    turn = {"n": 0, "calls": 0}

    def handler(request: Any) -> Any:
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
