"""Where a request's session comes from, with the real packages: our client (`session_key`,
`end_session`), LangGraph's checkpointer thread, the OpenAI Agents SDK's `group_id`, and
OpenTelemetry's `gen_ai.conversation.id` / `session.id` with `tracejudge.session.end` on the
root span. Every event is checked against the contract as the worker checks it."""

from __future__ import annotations

from typing import Any, cast

from agents import Agent, RunConfig, Runner, set_trace_processors
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import MemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from examples.langgraph_agent import ScriptedChatModel
from examples.openai_agents_agent import ScriptedModel, say
from tests.test_step_actors import Sink, receiving
from tracejudge.client.events import Recorder, session_end_event
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.integrations.openai_agents import TracejudgeProcessor
from tracejudge.client.integrations.otel import TracejudgeSpanProcessor
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import parse_event


def test_a_request_of_a_session_ends_it_and_one_without_sends_nothing() -> None:
    sink = Sink()
    req = Recorder(sink.emit, "Change my flight", session_key="chat-7", agent_name="bot")
    req.final("Done.")
    assert req.end_session(reason="the user left")
    end = sink.events[-1]
    assert (end["type"], end["request_id"], end["session_key"], end["agent_name"]) == (
        "session_end",
        req.request_id,
        "chat-7",
        "bot",
    )
    alone = Recorder(sink.emit, "One-shot question")
    assert not alone.end_session()
    assert sink.events[-1]["type"] == "task_started"  # nothing sent for it


def test_a_session_end_is_validated_before_it_leaves() -> None:
    parse_event(session_end_event("chat-1", agent_name="bot"))  # an id of its own
    for bad in ("", "x" * 300):
        try:
            session_end_event(bad)
        except InvalidEvent as exc:
            assert "session_key" in str(exc)
        else:
            raise AssertionError(f"{bad[:10]!r} was taken")


def test_a_langgraph_thread_is_the_requests_session() -> None:
    model = ScriptedChatModel(responses=[AIMessage("Your flight is moved."), AIMessage("Yes.")])

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    graph = builder.compile(checkpointer=MemorySaver())
    sink = Sink()
    handler = TracejudgeCallbackHandler(cast(Any, sink), agent_name="support")
    config: Any = {"configurable": {"thread_id": "thread-42"}, "callbacks": [handler]}
    first: Any = {"messages": [("user", "Move my flight to Friday.")]}
    second: Any = {"messages": [("user", "Is that confirmed?")]}
    graph.invoke(first, config)
    graph.invoke(second, config)
    requests = {e["request_id"] for e in sink.events}
    assert len(requests) == 2  # two turns, two requests
    assert {e.get("session_key") for e in sink.events} == {"thread-42"}
    # a run without a thread has no session
    other = Sink()
    plain = TracejudgeCallbackHandler(cast(Any, other), agent_name="support")
    hello: Any = {"messages": [("user", "Hi")]}
    builder.compile().invoke(hello, {"callbacks": [plain]})
    assert all("session_key" not in e for e in other.events)


async def test_an_agents_sdk_group_id_is_the_requests_session() -> None:
    agent = Agent(name="support", model=ScriptedModel([([say("Moved to Friday.")], 50, 5)]))
    sink = Sink()
    set_trace_processors([TracejudgeProcessor(cast(Any, sink))])
    result = await Runner.run(agent, "Move my flight.", run_config=RunConfig(group_id="conv-9"))
    assert result.final_output == "Moved to Friday."
    assert {e.get("session_key") for e in sink.events} == {"conv-9"}


def conversation_turn(provider: TracerProvider, ends: bool) -> None:
    tracer = provider.get_tracer("test")
    root: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "support",
        "gen_ai.conversation.id": "conv-otel-1",
        "tracejudge.session.end": ends,
    }
    with tracer.start_as_current_span("invoke_agent support", attributes=root):
        chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
        with tracer.start_as_current_span("chat gpt-4o", attributes=chat):
            pass


def test_the_span_processor_ends_a_session_where_the_root_says_so() -> None:
    sink = Sink()
    provider = TracerProvider()
    provider.add_span_processor(TracejudgeSpanProcessor(cast(Any, sink)))
    conversation_turn(provider, ends=False)
    conversation_turn(provider, ends=True)
    kinds = [e["type"] for e in sink.events]
    assert kinds.count("session_end") == 1 and kinds[-1] == "session_end"
    end = sink.events[-1]
    assert (end["session_key"], end["agent_name"]) == ("conv-otel-1", "support")
    finals = [e for e in sink.events if e["type"] == "final_response"]
    assert end["request_id"] == finals[-1]["request_id"]
    assert {e.get("session_key") for e in finals} == {"conv-otel-1"}


async def test_the_otlp_receiver_ends_a_session_where_the_root_says_so() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    conversation_turn(provider, ends=True)
    sent = await receiving([list(exporter.get_finished_spans())])
    assert [e["type"] for e in sent][-2:] == ["final_response", "session_end"]
    assert sent[-1]["session_key"] == "conv-otel-1" and sent[-1]["agent_name"] == "support"
