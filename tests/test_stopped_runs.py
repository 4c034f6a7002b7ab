"""A run the worker stopped, recorded by the client and the framework integrations, is never
judged passed and complete; one whose answer came before the stop was sent is judged on its
work. The client's recorder, the LangGraph handler and the Agents SDK processor are the real
ones; `Worker` plays the tracer and its reader with the worker's own handlers in memory behind
them: each event goes through the worker as it is recorded, and what the worker sends on the
control topic reaches the run before its next step, as the reader brings it.
tests/integration/test_framework_stops.py stops the same runs through a real broker."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from agents import Agent, Runner, function_tool, set_trace_processors
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent
from openai.types.responses import ResponseFunctionToolCall

from examples.langgraph_agent import ScriptedChatModel
from examples.openai_agents_agent import ScriptedModel, say
from tests.memory import MemoryWorker, memory_worker
from tracejudge.client.events import Recorder
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.integrations.openai_agents import TracejudgeProcessor
from tracejudge.client.interventions import InterventionStop, RequestWatch
from tracejudge.models.outputs import Intervention

T = TypeVar("T")
LOOPS = 20  # the same look-up scripted far more often than the loop rule needs
ANSWER = "Order 7 is paid: 20 EUR."
BASE_TS = 1_800_000_000.0
LOOP_STOPS = '[default]\nloop_action = "stop"\n'  # the first crossing of a loop rule stops


class Worker:
    """The tracer and its reader for the integrations, the worker's handlers behind them (on
    a loop of their own, so a framework's run on any thread or loop can wait for them). The
    run's clock ticks one second an event (`ts`), so a wall-time budget is crossed where a
    test says."""

    def __init__(self, tmp_path: Path, budgets: str | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        settings: dict[str, Any] = {}
        if budgets is not None:
            path = tmp_path / "budgets.toml"
            path.write_text(budgets)
            settings["budgets_file"] = str(path)
        self.worker: MemoryWorker = self._wait(_made(settings))
        self.watches: dict[str, RequestWatch] = {}
        self.sent: dict[str, int] = {}  # events per request
        self.told = 0  # control records handed to the runs

    def _wait(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(10)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    # the tracer, as the recorder and the integrations use it
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

    def _emit(self, event: dict[str, Any]) -> bool:
        rid = event["request_id"]
        n = self.sent[rid] = self.sent.get(rid, 0) + 1
        timed = {**json.loads(json.dumps(event)), "ts": BASE_TS + n - 1}
        self._wait(self.worker.event(timed))
        control = self.worker.channel("control").values()
        for value in control[self.told :]:
            told = Intervention.model_validate(value)
            watch = self.watches[told.request_id]
            watch.interventions.append(told)
            if told.action == "stop" and watch.stop is None:
                watch.stop = told
        self.told = len(control)
        return True

    def evaluation(self, rid: str | None) -> dict[str, Any]:
        (found,) = [
            e for e in self.worker.channel("evaluations").values() if e["request_id"] == rid
        ]
        return cast(dict[str, Any], found)

    def alerts(self, rid: str | None) -> list[dict[str, Any]]:
        return [a for a in self.worker.channel("alerts").values() if a["request_id"] == rid]


async def _made(settings: dict[str, Any]) -> MemoryWorker:
    return memory_worker(**settings)


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    made: list[Worker] = []

    def new(budgets: str | None = None) -> Worker:
        made.append(Worker(tmp_path, budgets))
        return made[-1]

    yield new
    for worker in made:
        worker.close()


def assert_stopped(worker: Worker, rid: str | None) -> dict[str, Any]:
    """Stopped before its answer: never passed and complete, and it says by what."""
    e = worker.evaluation(rid)
    assert [(i["action"], i["stopped_after"]) for i in e["interventions"]] == [("stop", True)]
    assert e["incomplete"] and not e["passed"]
    assert "stopped_by_intervention" in [f["rule"] for f in e["findings"]]
    (alert,) = [a for a in worker.alerts(rid) if a["kind"] == "low_score"]
    assert "stopped by tracejudge for a repeated_call loop" in alert["message"]
    return e


def assert_answered_first(worker: Worker, rid: str | None) -> None:
    """Its answer was the event that crossed the wall-time budget: judged on its work."""
    e = worker.evaluation(rid)
    assert [(i["crossed"], i["at_step"]) for i in e["interventions"]] == [
        ("wall_s", worker.sent[str(rid)] - 1)
    ]
    assert e["passed"] and not e["incomplete"] and e["success"]


def wall_budget(events: int) -> str:
    """A wall-time budget the run's last event (its answer) is the first to cross."""
    return f"[default]\nwall_s = {events - 1.5}\n"


# -- the client --------------------------------------------------------------------------------


def client_run(worker: Worker, calls: list[int]) -> Recorder:
    """The loop docs/interventions.md shows: a step, then a look at `should_stop()`."""
    req = worker.request("Is order 7 paid?", agent_name="client-bot")
    for order in calls:
        req.tool_call(
            "get_order", args={"order_id": order}, result=f"order {order}: paid", success=True
        )
        if req.should_stop():
            told = req.stop_reason
            assert told is not None
            req.final(f"stopped: {told.message}", stopped_by=told.intervention_id)
            return req
    req.final(ANSWER)
    return req


def test_a_client_run_told_to_stop_is_not_passed_and_complete(make: Any) -> None:
    worker = make(LOOP_STOPS)
    req = client_run(worker, [7] * LOOPS)
    e = assert_stopped(worker, req.request_id)
    assert e["step_count"] == 3  # stopped on the crossing call: no step after it
    # its answer first: the same work, the wall-time budget crossed by the answer itself
    counted = make()
    client_run(counted, [7, 8, 9])
    events = counted.sent[next(iter(counted.sent))]
    worker = make(wall_budget(events))
    req = client_run(worker, [7, 8, 9])
    assert_answered_first(worker, req.request_id)


# -- LangGraph -----------------------------------------------------------------------------------


def react_agent(order_ids: list[int]) -> Any:
    @tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        return f"order {order_id}: paid, 20 EUR"

    script = [
        AIMessage(
            content="",
            tool_calls=[{"name": "get_order", "args": {"order_id": o}, "id": f"c{i}"}],
        )
        for i, o in enumerate(order_ids)
    ]
    model = ScriptedChatModel(responses=[*script, AIMessage(content=ANSWER)])
    return create_react_agent(model, ToolNode([get_order]))


ASKED: Any = {"messages": [("user", "Is order 7 paid?")]}


def langgraph_run(worker: Worker, order_ids: list[int]) -> TracejudgeCallbackHandler:
    handler = TracejudgeCallbackHandler(cast(Any, worker), agent_name="lc-bot")
    config: RunnableConfig = {"callbacks": [handler], "recursion_limit": 2 * LOOPS + 5}
    try:
        result = react_agent(order_ids).invoke(ASKED, config)
        assert result["messages"][-1].content == ANSWER
    except InterventionStop:
        pass
    return handler


def test_a_langgraph_run_told_to_stop_is_not_passed_and_complete(make: Any) -> None:
    worker = make(LOOP_STOPS)
    handler = langgraph_run(worker, [7] * LOOPS)
    assert handler.last_recorder is not None and handler.last_recorder.should_stop()
    assert_stopped(worker, handler.last_request_id)
    counted = make()
    langgraph_run(counted, [7, 8, 9])
    worker = make(wall_budget(counted.sent[next(iter(counted.sent))]))
    handler = langgraph_run(worker, [7, 8, 9])
    assert_answered_first(worker, handler.last_request_id)


# -- OpenAI Agents SDK ---------------------------------------------------------------------------


def sdk_agent(order_ids: list[int]) -> Agent[Any]:
    @function_tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        return f"order {order_id}: paid, 20 EUR"

    script: list[tuple[list[Any], int, int]] = [
        (
            [
                ResponseFunctionToolCall(
                    arguments=f'{{"order_id": {o}}}',
                    call_id=f"c{i}",  # the SDK runs a call id once
                    name="get_order",
                    type="function_call",
                    status="completed",
                )
            ],
            100,
            10,
        )
        for i, o in enumerate(order_ids)
    ]
    script.append(([say(ANSWER)], 100, 10))
    return Agent(name="oai-bot", model=ScriptedModel(script), tools=[get_order])


async def sdk_run(worker: Worker, order_ids: list[int]) -> TracejudgeProcessor:
    processor = TracejudgeProcessor(cast(Any, worker))
    set_trace_processors([processor])  # ours only: the SDK's default exporter goes to OpenAI
    try:
        result = await Runner.run(
            sdk_agent(order_ids),
            "Is order 7 paid?",
            hooks=processor.hooks(),
            max_turns=LOOPS + 5,
        )
        assert result.final_output == ANSWER
    except InterventionStop:
        pass
    return processor


async def test_an_agents_sdk_run_told_to_stop_is_not_passed_and_complete(make: Any) -> None:
    worker = make(LOOP_STOPS)
    processor = await sdk_run(worker, [7] * LOOPS)
    assert_stopped(worker, processor.last_request_id)
    counted = make()
    await sdk_run(counted, [7, 8, 9])
    worker = make(wall_budget(counted.sent[next(iter(counted.sent))]))
    processor = await sdk_run(worker, [7, 8, 9])
    assert_answered_first(worker, processor.last_request_id)
