"""OpenInference smolagents instrumentation, one scripted `ToolCallingAgent` run.

    .venv-instrumented/oi_smolagents/bin/python tests/instrumented/oi_smolagents/agent.py SCENARIO OUTFILE

The model is a minimal subclass of smolagents' `Model` (smolagents has no fake model of its
own) whose `generate` returns scripted `ChatMessage`s with tool calls and `TokenUsage`.

The instrumentor wraps `generate` only on the `Model` subclasses that the `smolagents` package
exports at `instrument()` time (`smolagents.<Name>.generate`); a user's own subclass that
overrides `generate` gets no LLM span. To get the LLM spans that the built-in models
(InferenceClientModel, LiteLLMModel, OpenAIModel, ...) produce, the scripted class is
exposed as `smolagents.ScriptedModel` before instrumenting. `OI_SMOLAGENTS_UNEXPORTED_MODEL=1`
skips that, to show what a custom model gets by default (no LLM spans).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Content capture: OpenInference records inputs/outputs/messages unless these hide them
# (TraceConfig env vars, all default false). Set explicitly, before instrumenting.
for _var in (
    "OPENINFERENCE_HIDE_INPUTS",
    "OPENINFERENCE_HIDE_OUTPUTS",
    "OPENINFERENCE_HIDE_INPUT_MESSAGES",
    "OPENINFERENCE_HIDE_OUTPUT_MESSAGES",
    "OPENINFERENCE_HIDE_INPUT_TEXT",
    "OPENINFERENCE_HIDE_OUTPUT_TEXT",
    "OPENINFERENCE_HIDE_LLM_INVOCATION_PARAMETERS",
    "OPENINFERENCE_HIDE_LLM_TOOLS",
):
    os.environ[_var] = "false"
# OTel GenAI attributes alongside OpenInference ones: off by default; opt-in for a variant capture.
os.environ.setdefault("OPENINFERENCE_ENABLE_GENAI_SEMCONV", "false")
os.environ["HF_HUB_OFFLINE"] = "1"

import capture
import smolagents
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from smolagents import Model, ToolCallingAgent, tool
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
)
from smolagents.monitoring import LogLevel, TokenUsage

AGENT_NAME = "support-bot"
FALLBACK_NAME = "support_bot"  # smolagents requires a Python identifier


def _call(n: int, name: str, arguments: dict) -> ChatMessageToolCall:
    return ChatMessageToolCall(
        id=f"call_{n}",
        type="function",
        # a JSON string, as OpenAI-style APIs return it (OpenAIModel, LiteLLMModel); smolagents
        # parses it after generate() returns. The instrumentor records
        # tool_call.function.arguments only when it is a str.
        function=ChatMessageToolCallFunction(name=name, arguments=json.dumps(arguments)),
    )


def script(scenario: str) -> list:
    """One entry per model call: (tool name, arguments), or an exception to raise."""
    if scenario == "ok":
        return [
            ("get_order", {"order_id": 7}),
            ("refund", {"order_id": 7}),
            ("final_answer", {"answer": "Refunded 20 EUR for order 7."}),
        ]
    if scenario == "tool_fails":
        return [
            ("get_order", {"order_id": 7}),
            ("refund", {"order_id": 7}),
            (
                "final_answer",
                {"answer": "I could not refund order 7: the payment gateway timed out."},
            ),
        ]
    if scenario == "loop":
        return [("get_order", {"order_id": 7})] * capture.LOOP_CALLS + [
            ("final_answer", {"answer": "I could not tell."})
        ]
    if scenario == "crash":
        return [("get_order", {"order_id": 7}), RuntimeError("model backend unavailable")]
    raise SystemExit(f"unknown scenario {scenario!r}; one of {capture.SCENARIOS}")


class ScriptedModel(Model):
    def __init__(self, steps: list) -> None:
        super().__init__(model_id="scripted-model")
        self.steps = list(steps)
        self.calls = 0

    def generate(
        self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs
    ):
        step = self.steps[self.calls]
        self.calls += 1
        if isinstance(step, BaseException):
            raise step
        name, arguments = step
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content="",
            tool_calls=[_call(self.calls, name, arguments)],
            token_usage=TokenUsage(input_tokens=100 + self.calls, output_tokens=10 + self.calls),
        )


def make_tools(scenario: str):
    @tool
    def get_order(order_id: int) -> dict:
        """Look up an order.

        Args:
            order_id: The order's number.
        """
        return {"order_id": 7, "amount_eur": 20, "status": "paid"}

    @tool
    def refund(order_id: int) -> str:
        """Refund an order.

        Args:
            order_id: The order's number.
        """
        if scenario == "tool_fails":
            raise RuntimeError("payment gateway timeout")
        return "refunded 20 EUR for order 7"

    return [get_order, refund]


def main() -> int:
    scenario, outfile = sys.argv[1], sys.argv[2]
    provider = capture.tracer_provider(outfile, service="support-service")
    if os.environ.get("OI_SMOLAGENTS_UNEXPORTED_MODEL") != "1":
        smolagents.ScriptedModel = ScriptedModel  # so the instrumentor wraps its generate
    SmolagentsInstrumentor().instrument(tracer_provider=provider)

    model = ScriptedModel(script(scenario))
    tools = make_tools(scenario)
    try:
        agent = ToolCallingAgent(
            tools=tools, model=model, name=AGENT_NAME, max_steps=10, verbosity_level=LogLevel.OFF
        )
    except ValueError as exc:
        print(f"name {AGENT_NAME!r} refused: {exc}", file=sys.stderr)
        agent = ToolCallingAgent(
            tools=tools, model=model, name=FALLBACK_NAME, max_steps=10, verbosity_level=LogLevel.OFF
        )

    try:
        result = agent.run(capture.TASK)
        print(f"result: {result!r}")
    except Exception as exc:  # the run's spans have ended by now
        print(f"run raised {type(exc).__name__}: {exc}", file=sys.stderr)
    for step in agent.memory.steps:
        err = getattr(step, "error", None)
        if err is not None:
            print(
                f"step {getattr(step, 'step_number', '?')} error {type(err).__name__}: {err}",
                file=sys.stderr,
            )
    capture.finish(provider)
    return 0


if __name__ == "__main__":
    sys.exit(main())
