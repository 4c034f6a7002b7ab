"""The same support-bot story written directly against `opentelemetry-util-genai`'s own API, as an
instrumentation author (or a team instrumenting its own loop) would: no openai client at all.

    .venv-instrumented/genai_official/bin/python tests/instrumented/genai_official/agent_util.py SCENARIO OUTFILE

One `invoke_agent support-bot` span (handler.invoke_local_agent) holds, per scripted model turn, a
`chat gpt-4o-mini` span (handler.inference) with its input/output messages (text, tool_call and
tool_call_response parts), token usage and model names, and per tool call an
`execute_tool NAME` span (handler.tool) with arguments and result, failed with the exception when
the tool raises. The model is a scripted Python function; in `crash` it raises on its 2nd turn.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Content on spans (the util reads this when each invocation finishes; SPAN_ONLY: no log events).
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import capture
from handloop import get_order, make_refund  # the same tools as the hand-written loops
from opentelemetry.util.genai.handler import TelemetryHandler
from opentelemetry.util.genai.types import (
    FunctionToolDefinition,
    InputMessage,
    OutputMessage,
    Text,
    ToolCallRequest,
    ToolCallResponse,
)

PROVIDER = "openai"
MODEL = "gpt-4o-mini"
MODEL_SERVED = "gpt-4o-mini-2024-07-18"
SYSTEM = "You are support-bot, a customer-service agent."
PARAMS = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}},
    "required": ["order_id"],
}
TOOL_DEFS = [
    FunctionToolDefinition(name="get_order", description="Look up an order.", parameters=PARAMS),
    FunctionToolDefinition(name="refund", description="Refund an order.", parameters=PARAMS),
]
TOOL_DESCRIPTIONS = {d.name: d.description for d in TOOL_DEFS}


# Scripted model turns: a tool name to call (with order_id=7), a final text, or RAISE.
RAISE = object()
SCRIPTS = {
    "ok": ["get_order", "refund", "Refunded 20 EUR for order 7."],
    "tool_fails": [
        "get_order",
        "refund",
        "I could not refund order 7: the payment gateway timed out.",
    ],
    "loop": ["get_order"] * capture.LOOP_CALLS + ["I could not tell."],
    "crash": ["get_order", RAISE],
}


def scripted_model(scenario: str):
    """Returns model(history) -> an OpenAI-like response dict (or raises)."""
    script = list(SCRIPTS[scenario])
    turn = {"n": 0, "calls": 0}

    def model(history: list[InputMessage]) -> dict:
        step = script[turn["n"]]
        turn["n"] += 1
        if step is RAISE:
            raise RuntimeError("model backend unavailable")
        usage = {"prompt_tokens": 40 + 10 * turn["n"], "completion_tokens": 12}
        if step in ("get_order", "refund"):
            turn["calls"] += 1
            parts = [
                ToolCallRequest(arguments={"order_id": 7}, name=step, id=f"call_{turn['calls']}")
            ]
            finish = "tool_calls"
        else:
            parts = [Text(content=step)]
            finish = "stop"
        return {
            "id": f"chatcmpl-{turn['n']}",
            "model": MODEL_SERVED,
            "parts": parts,
            "finish": finish,
            "usage": usage,
        }

    return model


def capture_tool_content(tool) -> bool:
    """The flag the util's docs say to check before setting tool arguments/result. 1.1b0 names it
    `should_capture_content_on_span` (attribute); 1.2b0+ renamed it `should_capture_content`."""
    flag = getattr(tool, "should_capture_content_on_span", None)
    return bool(tool.should_capture_content if flag is None else flag)


def run_agent(handler: TelemetryHandler, model, tools: dict) -> str:
    """The loop, each step reported through the util's invocation types."""
    with handler.invoke_local_agent(agent_name="support-bot", request_model=MODEL) as agent:
        agent.system_instruction = [Text(content=SYSTEM)]
        agent.input_messages = [InputMessage(role="user", parts=[Text(content=capture.TASK)])]
        agent.tool_definitions = TOOL_DEFS
        agent.input_tokens = agent.output_tokens = 0
        history: list[InputMessage] = list(agent.input_messages)
        while True:
            with handler.inference(PROVIDER, request_model=MODEL) as chat:
                chat.system_instruction = [Text(content=SYSTEM)]
                chat.input_messages = list(history)
                chat.tool_definitions = TOOL_DEFS
                response = model(history)  # raising here fails the chat span, then the agent span
                chat.response_model_name = response["model"]
                chat.response_id = response["id"]
                chat.finish_reasons = [response["finish"]]
                chat.input_tokens = response["usage"]["prompt_tokens"]
                chat.output_tokens = response["usage"]["completion_tokens"]
                chat.output_messages = [
                    OutputMessage(
                        role="assistant", parts=response["parts"], finish_reason=response["finish"]
                    )
                ]
            agent.input_tokens += chat.input_tokens
            agent.output_tokens += chat.output_tokens
            calls = [p for p in response["parts"] if isinstance(p, ToolCallRequest)]
            if not calls:
                answer = response["parts"][0].content
                agent.output_messages = [
                    OutputMessage(
                        role="assistant", parts=[Text(content=answer)], finish_reason="stop"
                    )
                ]
                agent.finish_reasons = ["stop"]
                return answer
            history.append(InputMessage(role="assistant", parts=list(calls)))
            for call in calls:
                try:
                    with handler.tool(
                        call.name,
                        tool_call_id=call.id,
                        tool_type="function",
                        tool_description=TOOL_DESCRIPTIONS[call.name],
                    ) as tool:
                        capture_content = capture_tool_content(tool)
                        if capture_content:
                            tool.arguments = call.arguments
                        result = tools[call.name](**call.arguments)
                        if capture_content:
                            tool.tool_result = result
                    content = result if isinstance(result, str) else json.dumps(result)
                except Exception as exc:  # the tool span failed with it; the loop hands it back
                    content = f"Error: {type(exc).__name__}: {exc}"
                history.append(
                    InputMessage(
                        role="tool", parts=[ToolCallResponse(response=content, id=call.id)]
                    )
                )


def main() -> int:
    scenario, out = sys.argv[1], sys.argv[2]
    assert scenario in capture.SCENARIOS, scenario
    provider = capture.tracer_provider(out, service="support-service")
    handler = TelemetryHandler(tracer_provider=provider)
    tools = {"get_order": get_order, "refund": make_refund(scenario)}
    error = None
    try:
        print(run_agent(handler, scripted_model(scenario), tools))
    except Exception as exc:  # after the agent span ended (failed with it)
        error = exc
    capture.finish(provider)
    if error is not None:
        print(f"run failed: {type(error).__name__}: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
