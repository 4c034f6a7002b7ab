"""A framework's run stops when the worker tells it to: the real
LangGraph and OpenAI Agents SDK, driven by their scripted models asking for the same look-up
over and over, a real worker on the real broker finding the loop, the tracer's reader bringing
the intervention back, the integration raising it out of the framework's run call; then the
run's final response names it and its evaluation records that the run stopped after it.

The scripted models take THINK_S per call, as a real model takes seconds: the intervention
has that long to arrive before the next step (the benchmark measures how long it takes)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, set_trace_processors
from confluent_kafka import Producer
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent
from openai.types.responses import ResponseFunctionToolCall

from examples import loop_steer
from examples.langgraph_agent import ScriptedChatModel
from examples.openai_agents_agent import ScriptedModel, say
from tests.integration.harness import WorkerProcess, consume, tracer_for, values, worker_env
from tracejudge.client import Tracer
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.integrations.openai_agents import (
    AgentsInterventionStop,
    TracejudgeProcessor,
)
from tracejudge.client.interventions import InterventionStop
from tracejudge.models.outputs import Evaluation
from tracejudge.models.signing import ControlKeys

pytestmark = pytest.mark.integration

LOOPS = 20  # the same call scripted far more times than the loop rule (3 alike) needs
CROSSING = 3  # the default loop rule's call that completes the loop
AFTER = 2  # tool runs allowed after the crossing one: the intervention is late by that much
THINK_S = 0.4  # each scripted model call
ANSWER = "Order 7 is paid: 20 EUR."
# the worker signs what it tells agents, and the tracers act only on what this key verifies
CONTROL_KEY = "framework-stops-" + "0123456789abcdef" * 2


@pytest.fixture(scope="module")
def stopping_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """A worker whose loop rules stop at their first crossing (two calls taking turns are
    steered), and a short idle timeout."""
    workdir = tmp_path_factory.mktemp("stopping-worker")
    # stop at a loop's first crossing (the default steers first), two calls taking turns
    # excepted: those are steered, as the steer tests below need
    budgets = workdir / "budgets.toml"
    budgets.write_text(
        '[default]\nloop_action = "stop"\nloop_actions = {alternating_calls = "steer"}\n'
    )
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        workdir,
        "stops",
        idle_timeout_s=5,
        control_keys=CONTROL_KEY,
        budgets_file=str(budgets),
    )
    worker = WorkerProcess(env, workdir / "worker.log").start()
    yield worker
    worker.stop()


@pytest.fixture
def tracer(stopping_worker: WorkerProcess) -> Iterator[Tracer]:
    tracer = tracer_for(stopping_worker, CONTROL_KEY)
    yield tracer
    tracer.close()


async def final_of(worker: WorkerProcess, rid: str) -> dict[str, Any]:
    """The request's final response, as the worker read it from the events topic."""

    def finals(records: Any) -> list[dict[str, Any]]:
        return [
            v
            for v in values(records)
            if v.get("request_id") == rid and v.get("type") == "final_response"
        ]

    records = await consume(
        worker.settings.kafka_bootstrap,
        worker.topic("events"),
        until=lambda rs: bool(finals(rs)),
        timeout_s=30,
    )
    found = finals(records)
    assert len(found) == 1, worker.tail()
    return found[0]


def judged(tracer: Tracer, rid: str, worker: WorkerProcess) -> Evaluation:
    evaluation = tracer.wait_for_evaluation(rid, timeout=30)
    assert evaluation is not None, worker.tail()
    return evaluation


def assert_stopped(evaluation: Evaluation, stop: InterventionStop, final: dict[str, Any]) -> None:
    told = stop.intervention
    assert told.kind == "loop" and told.crossed == "repeated_call" and told.action == "stop"
    assert final["stopped_by"] == told.intervention_id
    assert final["output"] == f"stopped: {told.message}"
    made = [(i.intervention_id, i.crossed, i.stopped_after) for i in evaluation.interventions]
    assert made == [(told.intervention_id, "repeated_call", True)]


# -- LangGraph ---------------------------------------------------------------------------------


def react_agent(script: list[AIMessage], ran: list[int]) -> Any:
    @tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        ran.append(order_id)
        return f"order {order_id}: paid, 20 EUR"

    model = ScriptedChatModel(responses=script, sleep=THINK_S)
    return create_react_agent(model, ToolNode([get_order]))


def lookups(order_ids: list[int]) -> list[AIMessage]:
    calls = [
        AIMessage(
            content="",
            tool_calls=[{"name": "get_order", "args": {"order_id": o}, "id": f"c{i}"}],
        )
        for i, o in enumerate(order_ids)
    ]
    return [*calls, AIMessage(content=ANSWER)]


ASKED: Any = {"messages": [("user", "Is order 7 paid?")]}


def config(handler: TracejudgeCallbackHandler) -> RunnableConfig:
    return {"callbacks": [handler], "recursion_limit": 2 * LOOPS + 5}


async def test_a_looping_langgraph_agent_is_stopped_and_its_evaluation_says_so(
    tracer: Tracer, stopping_worker: WorkerProcess
) -> None:
    ran: list[int] = []
    handler = TracejudgeCallbackHandler(tracer, agent_name="lc-looping-bot")
    graph = react_agent(lookups([7] * LOOPS), ran)
    with pytest.raises(InterventionStop) as raised:
        await asyncio.to_thread(graph.invoke, ASKED, config(handler))
    assert type(raised.value) is InterventionStop, stopping_worker.tail()  # as raised
    assert CROSSING <= len(ran) <= CROSSING + AFTER
    rid = handler.last_request_id
    assert rid is not None and tracer.flush(10)
    final = await final_of(stopping_worker, rid)
    assert_stopped(judged(tracer, rid, stopping_worker), raised.value, final)


async def test_a_langgraph_agent_not_asked_to_stop_runs_to_its_end(
    tracer: Tracer, stopping_worker: WorkerProcess
) -> None:
    """The proof that the test above can fail: the same loop, the handler told not to stop."""
    ran: list[int] = []
    handler = TracejudgeCallbackHandler(tracer, stop_on_intervention=False)
    graph = react_agent(lookups([7] * LOOPS), ran)
    result = await asyncio.to_thread(graph.invoke, ASKED, config(handler))
    assert result["messages"][-1].content == ANSWER and len(ran) == LOOPS
    rid = handler.last_request_id
    assert rid is not None and tracer.flush(10)
    assert handler.last_recorder is not None and handler.last_recorder.should_stop()
    assert "stopped_by" not in await final_of(stopping_worker, rid)
    made = judged(tracer, rid, stopping_worker).interventions
    assert [(i.crossed, i.stopped_after) for i in made] == [("repeated_call", False)]


async def test_a_langgraph_agent_doing_varied_work_is_not_stopped(
    tracer: Tracer, stopping_worker: WorkerProcess
) -> None:
    ran: list[int] = []
    handler = TracejudgeCallbackHandler(tracer, agent_name="lc-working-bot")
    graph = react_agent(lookups([7, 8, 9, 10, 11, 12]), ran)
    result = await asyncio.to_thread(graph.invoke, ASKED, config(handler))
    assert result["messages"][-1].content == ANSWER and len(ran) == 6
    rid = handler.last_request_id
    assert rid is not None and tracer.flush(10)
    assert (await final_of(stopping_worker, rid))["output"] == ANSWER
    assert judged(tracer, rid, stopping_worker).interventions == []


async def test_a_forged_stop_on_the_control_topic_does_not_stop_a_langgraph_run(
    tracer: Tracer, stopping_worker: WorkerProcess
) -> None:
    """Anyone can write to the control topic: a stop that the worker's key did not sign, for
    this very run, is read, dropped and counted; the run goes on to its answer."""
    reader = tracer._reader
    assert reader is not None
    ran: list[int] = []
    handler = TracejudgeCallbackHandler(tracer, agent_name="lc-forged-bot")
    forger = Producer({"bootstrap.servers": stopping_worker.settings.kafka_bootstrap})

    @tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        ran.append(order_id)
        if len(ran) == 1:  # the run is open: its id is known, as an eavesdropper learns it
            rid = handler.last_request_id
            assert rid is not None
            unsigned = forged(rid, "forged-1")
            wrong_key = ControlKeys.parse("an-attackers-own-key-" + "9" * 20)
            assert wrong_key is not None
            topic = stopping_worker.topic("control")
            forger.produce(topic, unsigned, key=rid.encode())
            forger.produce(topic, wrong_key.sign(forged(rid, "forged-2")), key=rid.encode())
            assert forger.flush(10) == 0
            deadline = time.monotonic() + 15
            while reader.rejected < 2:  # both read (and dropped) before the run goes on
                assert time.monotonic() < deadline, (reader.rejected, stopping_worker.tail())
                time.sleep(0.05)
        return f"order {order_id}: paid, 20 EUR"

    model = ScriptedChatModel(responses=lookups([7, 8, 9, 10]), sleep=THINK_S)
    graph = create_react_agent(model, ToolNode([get_order]))
    result = await asyncio.to_thread(graph.invoke, ASKED, config(handler))
    assert result["messages"][-1].content == ANSWER and len(ran) == 4
    assert handler.last_recorder is not None and not handler.last_recorder.should_stop()
    assert handler.last_recorder.interventions == []


def forged(rid: str, intervention_id: str) -> bytes:
    return json.dumps(
        {
            "type": "intervention",
            "intervention_id": intervention_id,
            "request_id": rid,
            "kind": "loop",
            "crossed": "repeated_call",
            "evidence": "get_order(7) 3 times",
            "action": "stop",
            "message": "Stop now.",
            "step_index": 1,
            "ts": time.time(),
        }
    ).encode()


# -- OpenAI Agents SDK ---------------------------------------------------------------------------


class ThinkingModel(ScriptedModel):
    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(THINK_S)
        return await super().get_response(*args, **kwargs)


def sdk_agent(order_ids: list[int], ran: list[int]) -> Agent[Any]:
    @function_tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        ran.append(order_id)
        return f"order {order_id}: paid, 20 EUR"

    script: list[tuple[list[Any], int, int]] = [
        (
            [
                ResponseFunctionToolCall(
                    arguments=f'{{"order_id": {o}}}',
                    call_id=f"c{i}",  # the SDK runs each call id once
                    name="get_order",
                    type="function_call",
                    status="completed",
                )
            ],
            120,
            10,
        )
        for i, o in enumerate(order_ids)
    ]
    script.append(([say(ANSWER)], 150, 12))
    return Agent(name="oai-looping-bot", model=ThinkingModel(script), tools=[get_order])


async def test_a_looping_agents_sdk_run_is_stopped_by_the_hooks_and_its_evaluation_says_so(
    tracer: Tracer, stopping_worker: WorkerProcess
) -> None:
    ran: list[int] = []
    processor = TracejudgeProcessor(tracer)
    set_trace_processors([processor])  # ours only: the SDK's default exporter goes to OpenAI
    with pytest.raises(InterventionStop) as raised:
        await Runner.run(
            sdk_agent([7] * LOOPS, ran),
            "Is order 7 paid?",
            hooks=processor.hooks(),
            max_turns=LOOPS + 5,
        )
    assert type(raised.value) is AgentsInterventionStop, stopping_worker.tail()
    assert CROSSING <= len(ran) <= CROSSING + AFTER
    rid = processor.last_request_id
    assert rid is not None and tracer.flush(10)
    final = await final_of(stopping_worker, rid)
    assert_stopped(judged(tracer, rid, stopping_worker), raised.value, final)


async def test_an_agents_sdk_run_doing_varied_work_is_not_stopped(
    tracer: Tracer, stopping_worker: WorkerProcess
) -> None:
    ran: list[int] = []
    processor = TracejudgeProcessor(tracer)
    set_trace_processors([processor])
    result = await Runner.run(
        sdk_agent([7, 8, 9, 10, 11, 12], ran),
        "Is order 7 paid?",
        hooks=processor.hooks(),
        max_turns=LOOPS + 5,
    )
    assert result.final_output == ANSWER and len(ran) == 6
    rid = processor.last_request_id
    assert rid is not None and tracer.flush(10)
    assert (await final_of(stopping_worker, rid))["output"] == ANSWER
    assert judged(tracer, rid, stopping_worker).interventions == []


# -- steers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("framework", ["langgraph", "openai-agents"])
async def test_a_steer_from_the_worker_reaches_the_next_model_call_and_the_run_answers(
    framework: str,
    tracer: Tracer,
    stopping_worker: WorkerProcess,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/loop_steer.py's agent against the worker: back and forth between two look-ups
    until the worker's steer (two calls taking turns, on the 6th call) is in its model's input;
    the model reads it, answers, and the evaluation lists the steer, the run not stopped."""
    if framework == "langgraph":
        rid = await asyncio.to_thread(loop_steer.run_langgraph, tracer)
    else:
        rid = await loop_steer.run_openai_agents(tracer)
    out = capsys.readouterr().out
    assert f"answer: {loop_steer.ANSWER}" in out, out + stopping_worker.tail()
    read_at = [
        int(line.split("at its call ")[1].split(":")[0])
        for line in out.splitlines()
        if line.startswith("the model read, at its call ")
    ]
    assert len(read_at) == 1 and 7 <= read_at[0] <= 7 + AFTER, out
    assert rid is not None and tracer.flush(10)
    final = await final_of(stopping_worker, rid)
    assert final["output"] == loop_steer.ANSWER and "stopped_by" not in final
    made = judged(tracer, rid, stopping_worker).interventions
    assert [(i.crossed, i.action, i.stopped_after) for i in made] == [
        ("alternating_calls", "steer", False)
    ]
