"""The support-bot story, run by pydantic-ai with its own OpenTelemetry instrumentation.

    .venv-instrumented/pydantic_ai/bin/python tests/instrumented/pydantic_ai/agent.py SCENARIO OUTFILE

The model is pydantic-ai's `FunctionModel` driven by a scripted function (no network). The
instrumentation is turned on as pydantic-ai documents it for a user without Logfire:
`Agent.instrument_all(InstrumentationSettings(tracer_provider=..., include_content=True))`.
`PYDANTIC_AI_INSTRUMENTATION_VERSION` (2..6; default: the package's own default) picks the data
format version.

Scenarios: those of `capture.SCENARIOS`, plus `tool_raises`. In pydantic-ai a tool hands an error
back to the model by raising `ModelRetry`, so in `tool_fails` `refund` raises
`ModelRetry("payment gateway timeout")` and the model then gives up; in `tool_raises` it raises
`RuntimeError("payment gateway timeout")`, which ends the run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import capture
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage

SCENARIOS = (*capture.SCENARIOS, "tool_raises")
ANSWERS = {
    "ok": "Refunded 20 EUR for order 7.",
    "tool_fails": "I could not refund order 7: the payment gateway timed out.",
    "loop": "I could not tell.",
}


def make_scripted_fn(scenario: str):
    def call(n: int, tool: str) -> ModelResponse:
        return ModelResponse(
            parts=[ToolCallPart(tool_name=tool, args={"order_id": 7}, tool_call_id=f"call_{n}")],
            usage=RequestUsage(input_tokens=50 + 10 * n, output_tokens=12),
        )

    def answer(n: int, text: str) -> ModelResponse:
        return ModelResponse(
            parts=[TextPart(content=text)],
            usage=RequestUsage(input_tokens=50 + 10 * n, output_tokens=15),
        )

    def scripted_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages) + 1  # this is model call number n
        if scenario == "loop":
            return call(n, "get_order") if n <= capture.LOOP_CALLS else answer(n, ANSWERS["loop"])
        if n == 1:
            return call(n, "get_order")
        if scenario == "crash":
            raise RuntimeError("model backend unavailable")
        if n == 2:
            return call(n, "refund")
        last = messages[-1]
        if scenario == "tool_fails":
            # the ModelRetry comes back as the refund call's answer (a ToolReturnPart with
            # outcome='retried' in this pydantic-ai; a RetryPromptPart in older ones)
            assert isinstance(last, ModelRequest) and any(
                getattr(p, "tool_call_id", None) == "call_2" for p in last.parts
            ), last
        return answer(n, ANSWERS["tool_fails" if scenario == "tool_fails" else "ok"])

    return scripted_fn


def build_agent(scenario: str) -> Agent:
    agent = Agent(FunctionModel(make_scripted_fn(scenario)), name="support-bot")

    @agent.tool_plain
    def get_order(order_id: int) -> dict:
        """Look an order up."""
        return {"order_id": 7, "amount_eur": 20, "status": "paid"}

    @agent.tool_plain
    def refund(order_id: int) -> str:
        """Refund an order in full."""
        if scenario == "tool_fails":
            raise ModelRetry("payment gateway timeout")
        if scenario == "tool_raises":
            raise RuntimeError("payment gateway timeout")
        return "refunded 20 EUR for order 7"

    return agent


def main() -> int:
    scenario, outfile = sys.argv[1], sys.argv[2]
    if scenario not in SCENARIOS:
        raise SystemExit(f"unknown scenario {scenario!r}; one of {SCENARIOS}")
    provider = capture.tracer_provider(outfile, service="support-service")
    settings = {"tracer_provider": provider, "include_content": True}
    if os.environ.get("PYDANTIC_AI_INSTRUMENTATION_VERSION"):
        settings["version"] = int(os.environ["PYDANTIC_AI_INSTRUMENTATION_VERSION"])
    Agent.instrument_all(InstrumentationSettings(**settings))
    agent = build_agent(scenario)
    try:
        result = agent.run_sync(capture.TASK)
        print(result.output)
    except Exception as exc:  # the run's spans have ended by now
        print(f"run ended with {type(exc).__name__}: {exc}", file=sys.stderr)
    capture.finish(provider)
    return 0


if __name__ == "__main__":
    sys.exit(main())
