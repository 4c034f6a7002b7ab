"""A LangGraph ReAct agent judged through `TracejudgeCallbackHandler`. Its model is LangChain's
own fake chat model with a script, so it runs with no API key and no network.

    TRACEJUDGE_KAFKA_BOOTSTRAP=127.0.0.1:PORT python -m examples.langgraph_agent
    python -m examples.langgraph_agent --bootstrap 127.0.0.1:PORT

With a real model, pass `handler` the same way: `config={"callbacks": [handler]}`.
"""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent

from examples._common import parser, report, tracer
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler


class ScriptedChatModel(FakeMessagesListChatModel):
    """LangChain's fake chat model, answering from a script; tools are bound by name only (the
    script already says which to call)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@tool
def get_order(order_id: int) -> str:
    """Look an order up."""
    return f"order {order_id}: paid, 20 EUR"


SCRIPT = [
    AIMessage(
        content="",
        tool_calls=[{"name": "get_order", "args": {"order_id": 7}, "id": "c1"}],
        usage_metadata={"input_tokens": 120, "output_tokens": 15, "total_tokens": 135},
    ),
    AIMessage(
        content="Order 7 is paid: 20 EUR.",
        usage_metadata={"input_tokens": 190, "output_tokens": 12, "total_tokens": 202},
    ),
]


def main(argv: list[str] | None = None) -> int:
    options = parser("examples.langgraph_agent", __doc__).parse_args(argv)
    judged = tracer(options)
    handler = TracejudgeCallbackHandler(judged, agent_name="langgraph-support-bot")
    graph = create_react_agent(ScriptedChatModel(responses=SCRIPT), ToolNode([get_order]))
    asked: Any = {"messages": [("user", "Is order 7 paid?")]}
    graph.invoke(asked, {"callbacks": [handler]})
    return report(judged, handler.last_request_id, options.bootstrap)


if __name__ == "__main__":
    sys.exit(main())
