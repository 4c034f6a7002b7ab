"""The support-bot story on LangChain/LangGraph, traced by OpenInference's LangChain instrumentor.

    .venv-instrumented/oi_langchain/bin/python tests/instrumented/oi_langchain/agent.py SCENARIO OUTFILE [VARIANT]

The agent is `langchain.agents.create_agent(model, tools, name="support-bot")`, the replacement
that LangGraph 1.x names for the deprecated `langgraph.prebuilt.create_react_agent`. The model is
langchain-core's `GenericFakeChatModel`, scripted with `AIMessage`s carrying `tool_calls` and
`usage_metadata`; its `bind_tools` returns itself. No network, no randomness.

VARIANT (optional, for comparison captures only):
  - `default` (the default): create_agent; in `tool_fails` a `ToolErrorMiddleware` hands the
    tool's exception back to the model as an error ToolMessage (create_agent's ToolNode re-raises
    a tool's own exception by default, which would end the run).
  - `raise`: create_agent without that middleware (the framework default: the tool error ends
    the run).
  - `legacy`: the deprecated `langgraph.prebuilt.create_react_agent(model, tools,
    name="support-bot")`, with `ToolNode(tools, handle_tool_errors=True)` passed in.

OPENINFERENCE_ENABLE_GENAI_SEMCONV=true in the caller's environment (left alone here) makes the
instrumentor add OTel `gen_ai.*` attributes alongside its own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Content capture: OpenInference's TraceConfig reads these (all default to false = capture all).
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
    os.environ[_var] = "false"
# Never send anything to LangSmith.
os.environ["LANGSMITH_TRACING"] = "false"
os.environ["LANGCHAIN_TRACING_V2"] = "false"

import capture
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from openinference.instrumentation import using_session
from openinference.instrumentation.langchain import LangChainInstrumentor

ANSWERS = {
    "ok": "Refunded 20 EUR for order 7.",
    "tool_fails": "I could not refund order 7: the payment gateway timed out.",
    "loop": "I could not tell.",
}


@tool
def get_order(order_id: int) -> dict:
    """Look up an order by its id."""
    return {"order_id": 7, "amount_eur": 20, "status": "paid"}


SCENARIO = sys.argv[1] if len(sys.argv) > 1 else "ok"


@tool
def refund(order_id: int) -> str:
    """Refund an order by its id."""
    if SCENARIO == "tool_fails":
        raise RuntimeError("payment gateway timeout")
    return "refunded 20 EUR for order 7"


class ScriptedChatModel(GenericFakeChatModel):
    """GenericFakeChatModel that accepts tools and can raise a scripted exception."""

    model_name: str = "scripted-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        item = next(self.messages)
        if isinstance(item, Exception):
            raise item
        return ChatResult(generations=[ChatGeneration(message=item)])

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}


_USAGE = iter([(50, 12), (80, 11), (110, 14), (130, 15), (150, 13), (170, 12), (190, 10)])


def _ai(content: str = "", calls: list[tuple[str, dict]] | None = None, n: int = 0) -> AIMessage:
    inp, out = next(_USAGE)
    return AIMessage(
        content=content,
        tool_calls=[
            {"name": name, "args": args, "id": f"call_{n}_{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(calls or [])
        ],
        usage_metadata={"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out},
    )


def script(scenario: str) -> list[Any]:
    if scenario == "ok":
        return [
            _ai(calls=[("get_order", {"order_id": 7})], n=1),
            _ai(calls=[("refund", {"order_id": 7})], n=2),
            _ai(ANSWERS["ok"]),
        ]
    if scenario == "tool_fails":
        return [
            _ai(calls=[("get_order", {"order_id": 7})], n=1),
            _ai(calls=[("refund", {"order_id": 7})], n=2),
            _ai(ANSWERS["tool_fails"]),
        ]
    if scenario == "loop":
        return [
            _ai(calls=[("get_order", {"order_id": 7})], n=i + 1) for i in range(capture.LOOP_CALLS)
        ] + [_ai(ANSWERS["loop"])]
    if scenario == "crash":
        return [
            _ai(calls=[("get_order", {"order_id": 7})], n=1),
            RuntimeError("model backend unavailable"),
        ]
    raise SystemExit(f"unknown scenario {scenario!r}")


def build_agent(model: ScriptedChatModel, variant: str):
    tools = [get_order, refund]
    if variant == "legacy":
        from langgraph.prebuilt import ToolNode, create_react_agent

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return create_react_agent(
                model, ToolNode(tools, handle_tool_errors=True), name="support-bot"
            )
    from langchain.agents import create_agent

    middleware = []
    if variant == "default":
        from langchain.agents.middleware import ToolErrorMiddleware
        from langgraph.prebuilt.tool_node import TOOL_CALL_ERROR_TEMPLATE

        def on_error(exc: Exception, request: Any) -> str:
            # the same text ToolNode(handle_tool_errors=True) would give the model
            return TOOL_CALL_ERROR_TEMPLATE.format(error=repr(exc))

        middleware.append(ToolErrorMiddleware(on_error))
    return create_agent(model, tools, middleware=middleware, name="support-bot")


def main() -> int:
    scenario, outfile = sys.argv[1], sys.argv[2]
    variant = sys.argv[3] if len(sys.argv) > 3 else "default"
    provider = capture.tracer_provider(outfile, service="support-service")
    LangChainInstrumentor().instrument(tracer_provider=provider)
    model = ScriptedChatModel(messages=iter(script(scenario)))
    agent = build_agent(model, variant)
    # CAPTURE_SESSION: the run is a turn of that conversation, as OpenInference marks one
    # (`using_session`: `session.id` on every span)
    session = os.environ.get("CAPTURE_SESSION")
    try:
        with using_session(session) if session else contextlib.nullcontext():
            result = agent.invoke(
                {"messages": [("user", capture.TASK)]},
                {"recursion_limit": 50},
            )
        print(result["messages"][-1].content)
    except Exception as exc:  # the run's spans have ended by now
        print(f"run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        capture.finish(provider)
    return 0


if __name__ == "__main__":
    sys.exit(main())
