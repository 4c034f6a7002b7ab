"""Who took each step of a multi-agent run (`actor`): given to the recorder by hand, and filled
by each integration, driven by the real framework from PyPI and its fake or scripted models (no
network): the LangGraph node, the Agents SDK agent, the OpenTelemetry span's agent, for the
span processor and for the OTLP receiver. tests/test_framework_stops.py drives the same
frameworks for stops; tests/test_otel_mapping.py maps hand-made spans."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any, cast

import pytest
from agents import Agent, Runner, function_tool, set_trace_processors
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openai.types.responses import ResponseFunctionToolCall
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer as OtelTracer

from examples.langgraph_agent import ScriptedChatModel
from examples.openai_agents_agent import ScriptedModel, say
from tracejudge.client.events import Recorder
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.integrations.openai_agents import TracejudgeProcessor
from tracejudge.client.integrations.otel import TracejudgeSpanProcessor
from tracejudge.models.events import parse_event
from tracejudge.settings import Settings
from tracejudge.streams.receiver.receiver import Receiver


class Sink:
    """Plays the tracer: keeps what the integrations hand over, each event checked against
    the contract as the worker checks it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def request(self, goal: str, **kwargs: Any) -> Recorder:
        return Recorder(self.emit, goal, **kwargs)

    def emit(self, event: dict[str, Any]) -> bool:
        parse_event({k: v for k, v in event.items() if v is not None})
        self.events.append(event)
        return True

    def steps(self) -> list[tuple[str, str | None]]:
        """(type, actor) of every event after the task."""
        return [(e["type"], e.get("actor")) for e in self.events if e["type"] != "task_started"]


def test_the_recorder_sends_each_steps_actor_when_given_and_none_otherwise() -> None:
    sink = Sink()
    req = sink.request("Refund order 7", agent_name="support")
    req.reasoning("look the order up", actor="planner")
    req.model_call("gpt-4o", input_tokens=10, actor="planner")
    req.tool_call("get_order", success=True, args={"order_id": 7}, actor="tools")
    req.user("and order 8?", actor="customer")
    req.iteration(1, response="draft", actor="coder")
    req.reasoning("no one named")
    req.final("Refunded.", actor="w" * 300)
    assert sink.steps() == [
        ("reasoning_step", "planner"),
        ("reasoning_step", "planner"),
        ("tool_call", "tools"),
        ("user_message", "customer"),
        ("iteration", "coder"),
        ("reasoning_step", None),
        ("final_response", "w" * 256),  # clipped to the contract's limit, not refused
    ]
    assert "actor" not in sink.events[0] and "actor" not in sink.events[6]  # not sent at all
    assert {e["agent_name"] for e in sink.events} == {"support"}  # the request's agent stays


# -- LangChain / LangGraph -----------------------------------------------------------------


@tool
def get_order(order_id: int) -> str:
    """Look an order up."""
    return f"order {order_id}: paid, 20 EUR"


def look_up(call_id: str) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": "get_order", "args": {"order_id": 7}, "id": call_id}]
    )


def test_a_langgraph_steps_actor_is_the_node_that_took_it() -> None:
    """Two agents as nodes, a researcher that calls a tool through the ToolNode and a writer
    that answers: each model call is its node's, the tool call the ToolNode's, the answer the
    writer's."""
    researcher_model = ScriptedChatModel(responses=[look_up("c1"), AIMessage("Paid, 20 EUR.")])
    writer_model = ScriptedChatModel(responses=[AIMessage("Order 7 is paid: 20 EUR.")])

    def researcher(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [researcher_model.invoke(state["messages"], config)]}

    def writer(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [writer_model.invoke(state["messages"], config)]}

    builder = StateGraph(MessagesState)
    builder.add_node("researcher", researcher)
    builder.add_node("tools", ToolNode([get_order]))
    builder.add_node("writer", writer)
    builder.add_edge(START, "researcher")
    builder.add_conditional_edges("researcher", tools_condition, {"tools": "tools", END: "writer"})
    builder.add_edge("tools", "researcher")
    builder.add_edge("writer", END)
    sink = Sink()
    handler = TracejudgeCallbackHandler(cast(Any, sink), agent_name="support")
    asked: Any = {"messages": [("user", "Is order 7 paid?")]}
    result = builder.compile().invoke(asked, {"callbacks": [handler]})
    assert result["messages"][-1].content == "Order 7 is paid: 20 EUR."
    assert sink.steps() == [
        ("reasoning_step", "researcher"),
        ("tool_call", "tools"),
        ("reasoning_step", "researcher"),
        ("reasoning_step", "writer"),
        ("final_response", "writer"),
    ]
    assert sink.events[-1]["output"] == "Order 7 is paid: 20 EUR."


def test_plain_langchain_has_no_node_and_sends_no_actor() -> None:
    model = ScriptedChatModel(responses=[look_up("c1"), AIMessage("Order 7 is paid.")])

    def agent(question: str, config: RunnableConfig) -> str:
        reply = model.invoke(question, config)
        get_order.invoke(reply.tool_calls[0]["args"], config)  # type: ignore[attr-defined]
        return str(model.invoke(question, config).content)

    sink = Sink()
    handler = TracejudgeCallbackHandler(cast(Any, sink))
    assert RunnableLambda(agent).invoke("Is order 7 paid?", {"callbacks": [handler]})
    assert [kind for kind, _ in sink.steps()] == [
        "reasoning_step",
        "tool_call",
        "reasoning_step",
        "final_response",
    ]
    assert not any("actor" in e for e in sink.events)


# -- OpenAI Agents SDK -----------------------------------------------------------------------


def function_call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        arguments=arguments, call_id=call_id, name=name, type="function_call", status="completed"
    )


async def test_an_agents_sdk_steps_actor_is_its_agent_and_a_handoff_switches_it() -> None:
    @function_tool
    def lookup_order(order_id: int) -> str:
        """Look an order up."""
        return f"order {order_id}: paid"

    billing = Agent(
        name="billing",
        model=ScriptedModel(
            [
                ([function_call("lookup_order", '{"order_id": 7}', "c2")], 120, 15),
                ([say("Order 7 is paid.")], 150, 8),
            ]
        ),
        tools=[lookup_order],
    )
    triage = Agent(
        name="triage",
        model=ScriptedModel([([function_call("transfer_to_billing", "{}", "c1")], 100, 10)]),
        handoffs=[billing],
    )
    sink = Sink()
    set_trace_processors([TracejudgeProcessor(cast(Any, sink))])
    result = await Runner.run(triage, "Is order 7 paid?")
    assert result.final_output == "Order 7 is paid."
    assert sink.steps() == [
        ("reasoning_step", "triage"),  # decided to hand off
        ("reasoning_step", "triage"),  # the handoff: the agent handing off
        ("reasoning_step", "billing"),
        ("tool_call", "billing"),
        ("reasoning_step", "billing"),
        ("final_response", "billing"),  # the agent that said the answer
    ]
    assert sink.events[2]["intent_summary"] == "handed off from triage to billing"
    assert {e["agent_name"] for e in sink.events} == {"triage"}  # the request's agent stays


# -- OpenTelemetry ---------------------------------------------------------------------------

CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}


def tool_span(name: str) -> dict[str, str]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}


def run_two_agents(tracer: OtelTracer) -> None:
    """An orchestrator that thinks, calls a researcher agent (named only once its span runs)
    whose tool call sits under a span that is no GenAI step, then calls a tool itself."""
    orchestrator = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "orchestrator"}
    with tracer.start_as_current_span("invoke_agent orchestrator", attributes=orchestrator):
        with tracer.start_as_current_span("chat gpt-4o", attributes=CHAT):
            pass
        with tracer.start_as_current_span("invoke_agent") as researcher:
            researcher.set_attribute("gen_ai.operation.name", "invoke_agent")
            researcher.set_attribute("gen_ai.agent.name", "researcher")
            with tracer.start_as_current_span("chat gpt-4o", attributes=CHAT):
                pass
            with (
                tracer.start_as_current_span("retrieve"),
                tracer.start_as_current_span("execute_tool search", attributes=tool_span("search")),
            ):
                pass
        with tracer.start_as_current_span("execute_tool refund", attributes=tool_span("refund")):
            pass


# every step of `run_two_agents`, in the order their spans end, with its actor
TWO_AGENTS = [
    ("reasoning_step", "chat gpt-4o", "orchestrator"),
    ("reasoning_step", "chat gpt-4o", "researcher"),
    ("tool_call", "search", "researcher"),
    ("reasoning_step", "invoke_agent researcher", "researcher"),
    ("tool_call", "refund", "orchestrator"),
    ("final_response", None, "orchestrator"),
]


def otel_steps(events: list[dict[str, Any]]) -> list[tuple[str, str | None, str | None]]:
    return [
        (e["type"], e.get("tool") or e.get("intent_summary"), e.get("actor"))
        for e in events
        if e["type"] != "task_started"
    ]


def test_the_span_processors_steps_carry_the_agent_they_ran_under() -> None:
    sink = Sink()
    provider = TracerProvider()
    provider.add_span_processor(TracejudgeSpanProcessor(cast(Any, sink)))
    run_two_agents(provider.get_tracer("test"))
    assert otel_steps(sink.events) == TWO_AGENTS
    [started] = [e for e in sink.events if e["type"] == "task_started"]
    assert "actor" not in started  # the task is no step


@pytest.fixture
def exported() -> Iterator[list[ReadableSpan]]:
    """The spans of `run_two_agents` as the real SDK exports them, in the order they ended."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run_two_agents(provider.get_tracer("test"))
    yield list(exporter.get_finished_spans())
    provider.shutdown()


class Producer:
    """Plays the receiver's Kafka producer: keeps what it publishes."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, topic: str, value: bytes, key: bytes) -> asyncio.Future[None]:
        event = json.loads(value)
        parse_event(event)
        self.sent.append(event)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def receiving(batches: list[list[ReadableSpan]]) -> list[dict[str, Any]]:
    """What the OTLP receiver publishes for these export batches (protobuf, as sent)."""
    receiver = Receiver(Settings(redis_url=""))
    await receiver.producer.stop()  # never started: the fake below publishes
    producer = Producer()
    receiver.producer = cast(Any, producer)
    for batch in batches:
        await receiver.accept(encode_spans(batch))
    return producer.sent


async def test_the_receiver_finds_each_steps_agent_among_the_batchs_spans(
    exported: list[ReadableSpan],
) -> None:
    assert otel_steps(await receiving([exported])) == TWO_AGENTS


async def test_the_receiver_cannot_know_an_agent_whose_span_comes_in_a_later_batch(
    exported: list[ReadableSpan],
) -> None:
    """A child ends, and is exported, before its parent: split before the researcher's span,
    the steps of the first batch name no agent of their own, and carry none."""
    events = await receiving([exported[:3], exported[3:]])
    assert otel_steps(events) == [
        ("reasoning_step", "chat gpt-4o", None),
        ("reasoning_step", "chat gpt-4o", None),
        ("tool_call", "search", None),
        *TWO_AGENTS[3:],
    ]
