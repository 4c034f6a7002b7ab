"""An OpenAI Agents SDK agent judged through `TracejudgeProcessor`, the SDK's own tracing. Its
model answers from a script (a `Model` of the SDK), so it runs with no API key and no network.

    TRACEJUDGE_KAFKA_BOOTSTRAP=127.0.0.1:PORT python -m examples.openai_agents_agent
    python -m examples.openai_agents_agent --bootstrap 127.0.0.1:PORT

With a real model, `add_trace_processor(TracejudgeProcessor(tracer))` is all it takes.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from agents import Agent, Runner, function_tool, generation_span, set_trace_processors
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from examples._common import parser, report, tracer
from tracejudge.client.integrations.openai_agents import TracejudgeProcessor


class ScriptedModel(Model):
    """Answers from a script, and traces each call with a generation span as the SDK's own
    models do."""

    def __init__(self, turns: list[tuple[list[Any], int, int]]) -> None:
        self.turns = list(turns)

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> Any:
        output, tokens_in, tokens_out = self.turns.pop(0)
        asked = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        usage = {"input_tokens": tokens_in, "output_tokens": tokens_out}
        with generation_span(input=asked, model="scripted-gpt", usage=usage) as span:
            span.span_data.output = [item.model_dump() for item in output]
        return ModelResponse(
            output=output,
            usage=Usage(
                1, tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out
            ),
            response_id=None,
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def call(name: str, arguments: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        arguments=arguments, call_id="c1", name=name, type="function_call", status="completed"
    )


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="m1",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
        role="assistant",
        status="completed",
        type="message",
    )


@function_tool
def get_order(order_id: int) -> str:
    """Look an order up."""
    return f"order {order_id}: paid, 20 EUR"


ANSWER = "Order 7 is paid: 20 EUR, on the card ending 4242."
SCRIPT = [([call("get_order", '{"order_id": 7}')], 150, 18), ([say(ANSWER)], 210, 25)]


async def run(judged: Any, processor: TracejudgeProcessor, script: list[Any]) -> str:
    set_trace_processors([processor])  # ours only: the SDK's default exporter goes to OpenAI
    agent = Agent(
        name="openai-agents-support-bot",
        instructions="Help with orders.",
        model=ScriptedModel(script),
        tools=[get_order],
    )
    result = await Runner.run(agent, "Is order 7 paid?")
    return str(result.final_output)


def main(argv: list[str] | None = None) -> int:
    options = parser("examples.openai_agents_agent", __doc__).parse_args(argv)
    judged = tracer(options)
    processor = TracejudgeProcessor(judged)
    asyncio.run(run(judged, processor, SCRIPT))
    return report(judged, processor.last_request_id, options.bootstrap)


if __name__ == "__main__":
    sys.exit(main())
