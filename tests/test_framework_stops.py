"""The framework integrations stop a run told to stop, the framework's own way, with
the real LangGraph and OpenAI Agents SDK and their scripted models. The worker and the
tracer's reader are played by `Told`: it tells a request to stop on its third tool call, as
the loop rule does; the handler, the processor and the frameworks are the real ones.
tests/integration/test_framework_stops.py does the same with a real worker on the broker."""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any, cast

import pytest
from agents import Agent, AgentsException, Runner, function_tool, set_trace_processors
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent
from openai.types.responses import ResponseFunctionToolCall

from examples.langgraph_agent import ScriptedChatModel
from examples.openai_agents_agent import ScriptedModel, say
from tracejudge.client.events import Recorder
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.integrations.openai_agents import (
    AgentsInterventionStop,
    TracejudgeProcessor,
)
from tracejudge.client.interventions import InterventionStop, RequestWatch
from tracejudge.models.outputs import Intervention

LOOPS = 20  # scripted calls of the same tool: far more than the loop rule needs
TOLD_AT = 3  # the tool call on which `Told` says stop


class Told:
    """Plays the tracer (recorders, events kept here) and the worker with its reader: on a
    request's TOLD_AT-th tool call (or event of type `on`), an intervention with `action`
    arrives for it."""

    def __init__(self, action: str = "stop", told_at: int = TOLD_AT, on: str = "tool_call") -> None:
        self.action = action
        self.told_at = told_at
        self.on = on
        self.events: list[dict[str, Any]] = []
        self.watches: dict[str, RequestWatch] = {}

    def request(self, goal: str, **kwargs: Any) -> Recorder:
        return Recorder(self._emit, goal, reader=cast(Any, self), **kwargs)

    def watch(self, request_id: str, on_intervention: Any = None) -> RequestWatch:
        self.watches[request_id] = RequestWatch(request_id, on_intervention)
        return self.watches[request_id]

    def forget(self, request_id: str, grace_s: float | None = None) -> None:
        return None

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def _emit(self, event: dict[str, Any]) -> bool:
        self.events.append(event)
        if event["type"] == self.on and len(self.of(self.on)) == self.told_at:
            told = Intervention(
                intervention_id=f"iv-{event['request_id']}",
                request_id=event["request_id"],
                kind="loop",
                crossed="repeated_call" if self.action == "stop" else "alternating_calls",
                evidence="get_order {order_id: 7} -> same result 3 times",
                action=cast(Any, self.action),
                message="The same call keeps giving the same result: try something else.",
                step_index=event["step_index"],
                ts=time.time(),
            )
            watch = self.watches[event["request_id"]]
            watch.interventions.append(told)
            if told.action == "stop":
                watch.stop = told
        return True


# -- LangChain / LangGraph -----------------------------------------------------------------


def looping_script(loops: int = LOOPS) -> list[AIMessage]:
    """The model asks for the same look-up `loops` times, then answers."""
    calls = [
        AIMessage(
            content="",
            tool_calls=[{"name": "get_order", "args": {"order_id": 7}, "id": f"c{i}"}],
        )
        for i in range(loops)
    ]
    return [*calls, AIMessage(content="Order 7 is paid.")]


def looping_graph(ran: list[int], handle_tool_errors: Any = None) -> Any:
    @tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        ran.append(order_id)
        return f"order {order_id}: paid"

    tools = (
        ToolNode([get_order])
        if handle_tool_errors is None
        else ToolNode([get_order], handle_tool_errors=handle_tool_errors)
    )
    return create_react_agent(ScriptedChatModel(responses=looping_script()), tools)


ASKED: Any = {"messages": [("user", "Is order 7 paid?")]}
LIMIT: RunnableConfig = {"recursion_limit": 2 * LOOPS + 5}


@pytest.mark.parametrize("handle_tool_errors", [None, True], ids=["default", "handled"])
def test_a_langgraph_run_told_to_stop_raises_intervention_stop_out_of_invoke(
    handle_tool_errors: Any,
) -> None:
    told, ran = Told(), list[int]()
    handler = TracejudgeCallbackHandler(cast(Any, told), agent_name="lc-bot")
    graph = looping_graph(ran, handle_tool_errors)
    with pytest.raises(InterventionStop) as raised:
        graph.invoke(ASKED, {**LIMIT, "callbacks": [handler]})
    assert type(raised.value) is InterventionStop  # not wrapped by LangGraph
    assert raised.value.intervention.crossed == "repeated_call"
    # the crossing call was the last to run: the next model or tool call never started
    assert len(ran) == TOLD_AT and len(told.of("tool_call")) == TOLD_AT
    final = told.of("final_response")
    assert len(final) == 1 and final[0]["stopped_by"] == raised.value.intervention.intervention_id
    assert final[0]["output"].startswith("stopped: The same call keeps giving")


async def test_a_langgraph_ainvoke_told_to_stop_raises_intervention_stop() -> None:
    told, ran = Told(), list[int]()
    handler = TracejudgeCallbackHandler(cast(Any, told))
    graph = looping_graph(ran)
    with pytest.raises(InterventionStop):
        await graph.ainvoke(ASKED, {**LIMIT, "callbacks": [handler]})
    assert len(ran) == TOLD_AT
    assert told.of("final_response")[0]["stopped_by"] == f"iv-{handler.last_request_id}"


def test_a_plain_chain_told_to_stop_raises_intervention_stop() -> None:
    """An agent loop written as a chain (no LangGraph): the model's next call raises."""
    told, ran = Told(), list[int]()
    model = ScriptedChatModel(responses=looping_script())

    @tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        ran.append(order_id)
        return f"order {order_id}: paid"

    def agent(question: str, config: RunnableConfig) -> str:
        for _ in range(LOOPS + 1):
            reply = model.invoke(question, config)
            if not getattr(reply, "tool_calls", None):
                return str(reply.content)
            get_order.invoke(reply.tool_calls[0]["args"], config)  # type: ignore[attr-defined]
        return "gave up"

    handler = TracejudgeCallbackHandler(cast(Any, told))
    with pytest.raises(InterventionStop):
        RunnableLambda(agent).invoke("Is order 7 paid?", {"callbacks": [handler]})
    assert len(ran) == TOLD_AT and told.of("final_response")[0]["stopped_by"]


def test_without_stop_on_intervention_the_run_goes_to_its_end() -> None:
    told, ran = Told(), list[int]()
    handler = TracejudgeCallbackHandler(cast(Any, told), stop_on_intervention=False)
    result = looping_graph(ran).invoke(ASKED, {**LIMIT, "callbacks": [handler]})
    assert result["messages"][-1].content == "Order 7 is paid."
    assert len(ran) == LOOPS
    assert handler.last_recorder is not None and handler.last_recorder.should_stop()
    assert "stopped_by" not in told.of("final_response")[0]


def test_a_steer_does_not_stop_the_run_and_is_there_to_read() -> None:
    told, ran = Told(action="steer"), list[int]()
    handler = TracejudgeCallbackHandler(cast(Any, told))
    result = looping_graph(ran).invoke(ASKED, {**LIMIT, "callbacks": [handler]})
    assert result["messages"][-1].content == "Order 7 is paid." and len(ran) == LOOPS
    assert handler.last_recorder is not None
    assert [i.action for i in handler.last_recorder.interventions] == ["steer"]


def test_no_other_failure_of_the_handler_reaches_the_agent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`raise_error` is True for InterventionStop: a recorder that fails must still not."""
    ran: list[int] = []

    class Broken(Told):
        def _emit(self, event: dict[str, Any]) -> bool:
            if event["type"] != "task_started":
                raise RuntimeError("the buffer is gone")
            return super()._emit(event)

    handler = TracejudgeCallbackHandler(cast(Any, Broken()))
    with caplog.at_level(logging.ERROR, logger="tracejudge.client"):
        result = looping_graph(ran).invoke(ASKED, {**LIMIT, "callbacks": [handler]})
    assert result["messages"][-1].content == "Order 7 is paid." and len(ran) == LOOPS
    assert "the buffer is gone" in caplog.text


class Noisy(BaseCallbackHandler):
    """A handler of someone else's that fails: LangChain logs it, as it should."""

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError("not ours")


@pytest.mark.parametrize(
    ("on", "raised_in", "tools_ran"),
    [("tool_call", "on_chat_model_start", TOLD_AT), ("reasoning_step", "on_tool_start", 2)],
    ids=["before-a-model-call", "before-a-tool"],
)
@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
async def test_a_stop_is_not_logged_as_an_error_by_langchain(
    on: str, raised_in: str, tools_ran: int, run: str, caplog: pytest.LogCaptureFixture
) -> None:
    """LangChain's callback manager logs whatever a handler raises as "Error in ..."; the
    handler's InterventionStop is a stop it was told to make, logged by tracejudge at INFO."""
    told, ran = Told(on=on), list[int]()
    handler = TracejudgeCallbackHandler(cast(Any, told))
    graph, config = looping_graph(ran), {**LIMIT, "callbacks": [handler, Noisy()]}
    with caplog.at_level(logging.DEBUG), pytest.raises(InterventionStop) as raised:
        if run == "invoke":
            graph.invoke(ASKED, config)
        else:
            await graph.ainvoke(ASKED, config)
    assert len(ran) == tools_ran  # stopped where told, before the next call
    assert f"iv-{handler.last_request_id}" == raised.value.intervention.intervention_id
    errors = [r.getMessage() for r in caplog.records if "Error in" in r.getMessage()]
    # the other handler's failure is still logged: the records were there to see
    assert errors and all(e.startswith("Error in Noisy.on_chat_model_start") for e in errors)
    said = [r for r in caplog.records if r.name == "tracejudge.client"]
    assert [r.levelno for r in said] == [logging.INFO]
    assert "stopping" in said[0].getMessage()
    assert raised_in in [f.name for f in traceback.extract_tb(raised.value.__traceback__)]


# -- OpenAI Agents SDK -----------------------------------------------------------------------


def lookup(i: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        arguments='{"order_id": 7}',
        call_id=f"c{i}",  # the SDK runs a call id once
        name="get_order",
        type="function_call",
        status="completed",
    )


def looping_agent(ran: list[int]) -> Agent[Any]:
    @function_tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        ran.append(order_id)
        return f"order {order_id}: paid"

    script: list[tuple[list[Any], int, int]] = [([lookup(i)], 100, 10) for i in range(LOOPS)]
    script.append(([say("Order 7 is paid.")], 100, 10))
    return Agent(name="oai-bot", model=ScriptedModel(script), tools=[get_order])


async def test_an_agents_sdk_run_with_the_hooks_told_to_stop_raises_out_of_runner_run() -> None:
    told, ran = Told(), list[int]()
    processor = TracejudgeProcessor(cast(Any, told))
    set_trace_processors([processor])
    with pytest.raises(InterventionStop) as raised:
        await Runner.run(looping_agent(ran), "Is order 7 paid?", hooks=processor.hooks())
    stop = raised.value
    # the SDK's own family, unchanged: not wrapped in a UserError, with the run's items
    assert type(stop) is AgentsInterventionStop and isinstance(stop, AgentsException)
    assert stop.run_data is not None and stop.run_data.new_items
    assert len(ran) == TOLD_AT and len(told.of("tool_call")) == TOLD_AT
    final = told.of("final_response")
    assert len(final) == 1 and final[0]["stopped_by"] == stop.intervention.intervention_id
    assert final[0]["output"].startswith("stopped: ")


async def test_an_agents_sdk_run_without_the_hooks_goes_to_its_end() -> None:
    told, ran = Told(), list[int]()
    processor = TracejudgeProcessor(cast(Any, told))
    set_trace_processors([processor])
    result = await Runner.run(looping_agent(ran), "Is order 7 paid?", max_turns=LOOPS + 5)
    assert result.final_output == "Order 7 is paid." and len(ran) == LOOPS
    assert "stopped_by" not in told.of("final_response")[0]


async def test_a_steer_reaches_the_agents_instructions_and_does_not_stop_it() -> None:
    told, ran = Told(action="steer"), list[int]()
    processor = TracejudgeProcessor(cast(Any, told))
    set_trace_processors([processor])
    heard: list[str] = []

    def instructions(context: Any, agent: Any) -> str:
        run = processor.current_request()
        steers = [i.message for i in (run.interventions if run else []) if i.action == "steer"]
        heard.extend(steers)
        return " ".join(["Help with orders.", *steers])

    agent = looping_agent(ran)
    agent.instructions = instructions
    result = await Runner.run(agent, "Is order 7 paid?", hooks=processor.hooks(), max_turns=25)
    assert result.final_output == "Order 7 is paid." and len(ran) == LOOPS
    assert heard and heard[0].startswith("The same call keeps giving")
