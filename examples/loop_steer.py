"""A looping agent steered by tracejudge while it runs, with LangGraph or the OpenAI Agents SDK.
Its scripted model looks order 7 up, then its shipment, then the order again, back and forth;
the worker finds the loop (two calls taking turns, nothing new learned) and sends a steer; the
integration adds the steer's words to the model's next call, once; the model reads them, stops
going back and forth and answers. The run goes on to its own end, and its evaluation lists the
steer. No API key, no network: the model reacts to the steer's text, nothing else.

    TRACEJUDGE_KAFKA_BOOTSTRAP=127.0.0.1:PORT python -m examples.loop_steer
    python -m examples.loop_steer --framework openai-agents --bootstrap 127.0.0.1:PORT

LangGraph: `create_react_agent(model, tools, pre_model_hook=handler.pre_model_hook)`. The Agents
SDK: `RunConfig(call_model_input_filter=processor.call_model_input_filter)`. A stop (a budget,
or the loop going on after the steer) still stops the run: it is printed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool, set_trace_processors
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent
from openai.types.responses import ResponseFunctionToolCall

from examples._common import parser, report, tracer
from examples.openai_agents_agent import ScriptedModel, say
from tracejudge.client import InterventionStop, Tracer
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.integrations.openai_agents import TracejudgeProcessor
from tracejudge.client.interventions import STEER_PREFIX

MAX_CALLS = 16  # how long the model would go back and forth untold; the loop is found on the 6th
THINK_S = 0.3  # a model takes a while to answer: time for the steer to arrive between steps
ANSWER = "Order 7 is paid; its shipment has no tracking number yet, so I asked the warehouse."
GOAL = "Where is order 7?"


def told(texts: list[str]) -> str | None:
    """The steer among the texts of the model's input, if it was given one."""
    return next((t for t in texts if t.startswith(STEER_PREFIX)), None)


def next_call(calls_so_far: int) -> tuple[str, dict[str, int]]:
    """Back and forth: the order, its shipment, the order, ..."""
    return ("get_order" if calls_so_far % 2 == 0 else "get_shipment"), {"order_id": 7}


def get_order_text(order_id: int) -> str:
    return f"order {order_id}: paid, 20 EUR, shipment pending"


def get_shipment_text(order_id: int) -> str:
    return f"shipment of order {order_id}: no tracking number yet"


# -- LangGraph ----------------------------------------------------------------------------------


class SteerableChatModel(BaseChatModel):
    """Goes back and forth between the two look-ups until its input holds a steer."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted-steerable"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        time.sleep(THINK_S)
        steer = told([str(m.content) for m in messages])
        calls = sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)
        if steer is not None or calls >= MAX_CALLS:
            if steer is not None:
                print(f"the model read, at its call {calls + 1}: {steer}")
            reply = AIMessage(content=ANSWER)
        else:
            name, given = next_call(calls)
            reply = AIMessage(
                content="", tool_calls=[{"name": name, "args": given, "id": f"c{calls}"}]
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def get_order(order_id: int) -> str:
    """Look an order up."""
    return get_order_text(order_id)


@tool
def get_shipment(order_id: int) -> str:
    """Look an order's shipment up."""
    return get_shipment_text(order_id)


def run_langgraph(judged: Tracer) -> str | None:
    handler = TracejudgeCallbackHandler(judged, agent_name="langgraph-steered-bot")
    graph = create_react_agent(
        SteerableChatModel(),
        ToolNode([get_order, get_shipment]),
        pre_model_hook=handler.pre_model_hook,  # the steers, into the next model call
    )
    try:
        result = graph.invoke(
            {"messages": [("user", GOAL)]},
            {"callbacks": [handler], "recursion_limit": 3 * MAX_CALLS + 10},
        )
        print(f"answer: {result['messages'][-1].content}")
    except InterventionStop as stop:
        print(f"stopped by tracejudge: {stop.intervention.crossed}: {stop.intervention.message}")
    return handler.last_request_id


# -- OpenAI Agents SDK --------------------------------------------------------------------------


class SteerableModel(ScriptedModel):
    """The same model for the Agents SDK (a generation span per call, as ScriptedModel)."""

    def __init__(self) -> None:
        super().__init__([])

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> Any:
        await asyncio.sleep(THINK_S)
        items = [] if isinstance(input, str) else list(input)
        texts = [str(i.get("content")) for i in items if isinstance(i, dict)]
        steer = told(texts)
        calls = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call")
        if steer is not None or calls >= MAX_CALLS:
            if steer is not None:
                print(f"the model read, at its call {calls + 1}: {steer}")
            output: Any = say(ANSWER)
        else:
            name, _ = next_call(calls)
            output = ResponseFunctionToolCall(
                arguments='{"order_id": 7}',
                call_id=f"c{calls}",
                name=name,
                type="function_call",
                status="completed",
            )
        self.turns = [([output], 150, 15)]
        return await super().get_response(system_instructions, input, *args, **kw)


@function_tool(name_override="get_order")
def sdk_get_order(order_id: int) -> str:
    """Look an order up."""
    return get_order_text(order_id)


@function_tool(name_override="get_shipment")
def sdk_get_shipment(order_id: int) -> str:
    """Look an order's shipment up."""
    return get_shipment_text(order_id)


async def run_openai_agents(judged: Tracer) -> str | None:
    processor = TracejudgeProcessor(judged)
    set_trace_processors([processor])  # ours only: the SDK's default exporter goes to OpenAI
    agent = Agent(
        name="openai-agents-steered-bot",
        instructions="Help with orders.",
        model=SteerableModel(),
        tools=[sdk_get_order, sdk_get_shipment],
    )
    try:
        result = await Runner.run(
            agent,
            GOAL,
            hooks=processor.hooks(),  # a stop ends the run
            run_config=RunConfig(call_model_input_filter=processor.call_model_input_filter),
            max_turns=MAX_CALLS + 5,
        )
        print(f"answer: {result.final_output}")
    except InterventionStop as stop:
        print(f"stopped by tracejudge: {stop.intervention.crossed}: {stop.intervention.message}")
    return processor.last_request_id


def main(argv: list[str] | None = None) -> int:
    found = parser("examples.loop_steer", __doc__)
    found.add_argument(
        "--framework",
        choices=["langgraph", "openai-agents"],
        default="langgraph",
        help="the agent's framework (default: %(default)s)",
    )
    options = found.parse_args(argv)
    judged = tracer(options)
    if options.framework == "langgraph":
        request_id = run_langgraph(judged)
    else:
        request_id = asyncio.run(run_openai_agents(judged))
    return report(judged, request_id, options.bootstrap)


if __name__ == "__main__":
    sys.exit(main())
