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
from agents import Agent, AgentsException, RunConfig, Runner, function_tool, set_trace_processors
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent
from openai.types.responses import ResponseFunctionToolCall
from pydantic import Field

from examples import loop_steer
from examples.langgraph_agent import ScriptedChatModel
from examples.openai_agents_agent import ScriptedModel, say
from tracejudge.client.events import Recorder
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.integrations.openai_agents import (
    AgentsInterventionStop,
    TracejudgeProcessor,
)
from tracejudge.client.interventions import (
    STEER_PREFIX,
    InterventionStop,
    RequestWatch,
    steer_text,
)
from tracejudge.models.outputs import Intervention

LOOPS = 20  # scripted calls of the same tool: far more than the loop rule needs
TOLD_AT = 3  # the tool call on which `Told` says stop


class Told:
    """Plays the tracer (recorders, events kept here) and the worker with its reader: on a
    request's TOLD_AT-th tool call (or event of type `on`), an intervention with `action`
    arrives for it; and a stop on the `stop_at`-th, when given (a steer first, as the worker
    does when the loop goes on)."""

    def __init__(
        self,
        action: str = "stop",
        told_at: int = TOLD_AT,
        on: str = "tool_call",
        stop_at: int | None = None,
    ) -> None:
        self.action = action
        self.told_at = told_at
        self.on = on
        self.stop_at = stop_at
        self.events: list[dict[str, Any]] = []
        self.watches: dict[str, RequestWatch] = {}

    def request(self, goal: str, **kwargs: Any) -> Recorder:
        return Recorder(self._emit, goal, reader=cast(Any, self), **kwargs)

    def watch(
        self, request_id: str, on_intervention: Any = None, *, run_nonce: str | None = None
    ) -> RequestWatch:
        self.watches[request_id] = RequestWatch(request_id, on_intervention, run_nonce=run_nonce)
        return self.watches[request_id]

    def forget(self, request_id: str, grace_s: float | None = None) -> None:
        return None

    def keep_alive(self) -> None:
        return None

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def _emit(self, event: dict[str, Any]) -> bool:
        self.events.append(event)
        if event["type"] == self.on and len(self.of(self.on)) == self.told_at:
            self.tell(event, self.action, f"iv-{event['request_id']}")
        if event["type"] == self.on and len(self.of(self.on)) == self.stop_at:
            self.tell(event, "stop", f"iv-stop-{event['request_id']}")
        return True

    def tell(self, event: dict[str, Any], action: str, intervention_id: str) -> None:
        told = Intervention(
            intervention_id=intervention_id,
            request_id=event["request_id"],
            kind="loop",
            crossed="repeated_call" if action == "stop" else "alternating_calls",
            evidence="get_order {order_id: 7} -> same result 3 times",
            action=cast(Any, action),
            message="The same call keeps giving the same result: try something else.",
            step_index=event["step_index"],
            ts=time.time(),
        )
        watch = self.watches[event["request_id"]]
        watch.interventions.append(told)
        if told.action == "stop" and watch.stop is None:
            watch.stop = told


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


class HeardChatModel(ScriptedChatModel):
    """The scripted model, keeping the messages of each of its calls as it got them."""

    heard: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.heard.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def steered_graph(ran: list[int], handler: TracejudgeCallbackHandler) -> tuple[Any, HeardChatModel]:
    """The looping agent with the handler's hook before each model call, and its model."""

    @tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        ran.append(order_id)
        return f"order {order_id}: paid"

    model = HeardChatModel(responses=looping_script())
    graph = create_react_agent(model, ToolNode([get_order]), pre_model_hook=handler.pre_model_hook)
    return graph, model


STEERED_LIMIT: RunnableConfig = {"recursion_limit": 3 * LOOPS + 5}  # the hook is a node too


def steers_in(messages: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in messages if str(m.content).startswith(STEER_PREFIX)]


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
async def test_a_steer_is_in_the_next_model_calls_input_once_and_the_run_goes_on(
    run: str,
) -> None:
    told, ran = Told(action="steer"), list[int]()
    handler = TracejudgeCallbackHandler(cast(Any, told))
    graph, model = steered_graph(ran, handler)
    config = {**STEERED_LIMIT, "callbacks": [handler]}
    result = graph.invoke(ASKED, config) if run == "invoke" else await graph.ainvoke(ASKED, config)
    assert result["messages"][-1].content == "Order 7 is paid." and len(ran) == LOOPS
    heard = model.heard
    assert len(heard) == LOOPS + 1
    # told on the TOLD_AT-th tool call: the model call after it is the first to read it, as
    # the last message, after the tool's answer
    assert [len(steers_in(m)) for m in heard] == [0] * TOLD_AT + [1] * (LOOPS + 1 - TOLD_AT)
    steer = heard[TOLD_AT][-1]
    assert isinstance(steer, HumanMessage) and heard[TOLD_AT][-2].type == "tool"
    recorder = handler.last_recorder
    assert recorder is not None and steer.content == steer_text(recorder.interventions[0])
    # tracejudge's words and where: the run's own text (the evidence) is never handed back
    assert "get_order {order_id: 7}" not in str(steer.content)
    assert "(loop " in str(steer.content)
    assert len(steers_in(result["messages"])) == 1  # in the conversation once
    assert recorder.pending_steers() == []  # handed out: nobody gets it again
    assert "stopped_by" not in told.of("final_response")[0]


def test_a_stop_still_stops_a_steered_graph_and_a_steer_before_it_was_read_once() -> None:
    told, ran = Told(action="steer", stop_at=TOLD_AT + 2), list[int]()
    handler = TracejudgeCallbackHandler(cast(Any, told))
    graph, model = steered_graph(ran, handler)
    with pytest.raises(InterventionStop) as raised:
        graph.invoke(ASKED, {**STEERED_LIMIT, "callbacks": [handler]})
    assert raised.value.intervention.intervention_id == f"iv-stop-{handler.last_request_id}"
    assert len(ran) == TOLD_AT + 2  # the model call after the stop never started
    heard = model.heard
    assert len(heard) == TOLD_AT + 2
    assert [len(steers_in(m)) for m in heard] == [0] * TOLD_AT + [1, 1]
    assert told.of("final_response")[0]["stopped_by"] == f"iv-stop-{handler.last_request_id}"


def test_a_stop_arriving_with_a_steer_stops_before_the_model_reads_the_steer() -> None:
    told, ran = Told(action="steer", stop_at=TOLD_AT), list[int]()
    handler = TracejudgeCallbackHandler(cast(Any, told))
    graph, model = steered_graph(ran, handler)
    with pytest.raises(InterventionStop):
        graph.invoke(ASKED, {**STEERED_LIMIT, "callbacks": [handler]})
    assert len(model.heard) == TOLD_AT and len(ran) == TOLD_AT
    assert not any(steers_in(m) for m in model.heard)


def test_a_plain_chain_takes_its_steers_from_steer_messages() -> None:
    """No LangGraph: the agent's own loop adds `steer_messages(config)` to what it sends, here
    as system messages."""
    told, ran = Told(action="steer"), list[int]()
    model = HeardChatModel(responses=looping_script())
    handler = TracejudgeCallbackHandler(cast(Any, told), steer_role="system")

    @tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        ran.append(order_id)
        return f"order {order_id}: paid"

    def agent(question: str, config: RunnableConfig) -> str:
        messages: list[BaseMessage] = [HumanMessage(question)]
        for _ in range(LOOPS + 1):
            reply = model.invoke(messages + handler.steer_messages(config), config)
            if not getattr(reply, "tool_calls", None):
                return str(reply.content)
            get_order.invoke(reply.tool_calls[0]["args"], config)  # type: ignore[attr-defined]
        return "gave up"

    answer = RunnableLambda(agent).invoke("Is order 7 paid?", {"callbacks": [handler]})
    assert answer == "Order 7 is paid." and len(ran) == LOOPS
    # this loop keeps no history: the steer is in the one call after it arrived
    assert [len(steers_in(m)) for m in model.heard] == [0] * TOLD_AT + [1] + [0] * (LOOPS - TOLD_AT)
    assert isinstance(model.heard[TOLD_AT][-1], SystemMessage)


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


class HeardModel(ScriptedModel):
    """The scripted Agents SDK model, keeping the input of each of its calls as it got it."""

    def __init__(self, turns: list[tuple[list[Any], int, int]]) -> None:
        super().__init__(turns)
        self.heard: list[list[Any]] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> Any:
        self.heard.append([input] if isinstance(input, str) else list(input))
        return await super().get_response(system_instructions, input, *args, **kw)


def steered_agent(ran: list[int]) -> tuple[Agent[Any], HeardModel]:
    agent = looping_agent(ran)
    model = HeardModel(cast(ScriptedModel, agent.model).turns)
    agent.model = model
    return agent, model


def said_steers(items: list[Any]) -> list[Any]:
    return [
        i
        for i in items
        if isinstance(i, dict) and str(i.get("content", "")).startswith(STEER_PREFIX)
    ]


async def test_an_agents_sdk_steer_is_in_the_next_model_calls_input_once() -> None:
    told, ran = Told(action="steer"), list[int]()
    processor = TracejudgeProcessor(cast(Any, told))
    set_trace_processors([processor])
    agent, model = steered_agent(ran)
    result = await Runner.run(
        agent,
        "Is order 7 paid?",
        hooks=processor.hooks(),
        run_config=RunConfig(call_model_input_filter=processor.call_model_input_filter),
        max_turns=LOOPS + 5,
    )
    assert result.final_output == "Order 7 is paid." and len(ran) == LOOPS
    assert len(model.heard) == LOOPS + 1
    # the call after the TOLD_AT-th tool call reads it, last, after the tool's output; the SDK
    # keeps nothing the filter added, so no later call has it again
    counts = [len(said_steers(items)) for items in model.heard]
    assert counts == [0] * TOLD_AT + [1] + [0] * (LOOPS - TOLD_AT)
    steer = model.heard[TOLD_AT][-1]
    assert steer["role"] == "user" and model.heard[TOLD_AT][-2]["type"] == "function_call_output"
    watch = next(iter(told.watches.values()))  # the run's request, as the reader keeps it
    assert steer["content"] == steer_text(watch.interventions[0])
    assert watch.take_steers() == []  # handed out once
    assert "stopped_by" not in told.of("final_response")[0]


async def test_an_agents_sdk_stop_still_stops_a_steered_run() -> None:
    told, ran = Told(action="steer", stop_at=TOLD_AT + 2), list[int]()
    processor = TracejudgeProcessor(cast(Any, told), steer_role="system")
    set_trace_processors([processor])
    agent, model = steered_agent(ran)
    with pytest.raises(AgentsInterventionStop) as raised:
        await Runner.run(
            agent,
            "Is order 7 paid?",
            hooks=processor.hooks(),
            run_config=RunConfig(call_model_input_filter=processor.call_model_input_filter),
            max_turns=LOOPS + 5,
        )
    assert raised.value.intervention.action == "stop" and len(ran) == TOLD_AT + 2
    counts = [len(said_steers(items)) for items in model.heard]
    assert counts == [0] * TOLD_AT + [1, 0]  # the call after the stop never went out
    assert model.heard[TOLD_AT][-1]["role"] == "system"
    final = told.of("final_response")
    assert len(final) == 1 and final[0]["stopped_by"] == raised.value.intervention.intervention_id


@pytest.mark.parametrize("framework", ["langgraph", "openai-agents"])
async def test_the_steer_example_reads_its_steer_and_answers(
    framework: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/loop_steer.py without a broker: told on its 6th call (where the worker finds
    its back and forth), its model reads the steer in its 7th and answers."""
    monkeypatch.setattr(loop_steer, "THINK_S", 0.0)
    told = Told(action="steer", told_at=6)
    if framework == "langgraph":
        loop_steer.run_langgraph(cast(Any, told))
    else:
        await loop_steer.run_openai_agents(cast(Any, told))
    out = capsys.readouterr().out
    assert f"the model read, at its call 7: {STEER_PREFIX}" in out
    assert f"answer: {loop_steer.ANSWER}" in out
    assert [e["tool"] for e in told.of("tool_call")] == ["get_order", "get_shipment"] * 3
    assert told.of("final_response")[0]["output"] == loop_steer.ANSWER
