"""Steer before stopping, on the real broker with the default loop policy: a LangGraph agent of
an agent whose normal is known gets a steer on its loop's first crossing, the steer is in its
next model call; when it loops again, now longer than its agent's runs, it is stopped. The same
agent leaving the loop after the steer is not stopped. `tracejudge status` counts both."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent

from tests.integration.harness import WorkerProcess, worker_env
from tests.integration.test_reflection_loop import status_json
from tracejudge.client import InterventionStop, Tracer
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.interventions import STEER_PREFIX
from tracejudge.models.outputs import Evaluation

pytestmark = pytest.mark.integration

AGENT = "steer-then-stop-bot"
PAST_RUNS = 3  # the agent's normal: runs of two look-ups each
THINK_S = 0.3  # a model takes a while: time for the steer to arrive before the next call
MAX_CALLS = 20


@pytest.fixture(scope="module")
def worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """Default loop policy; the agent's normal known after PAST_RUNS runs."""
    workdir = tmp_path_factory.mktemp("steer-then-stop")
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        workdir,
        "steerstop",
        idle_timeout_s=5,
        baseline_min_runs=PAST_RUNS,
    )
    process = WorkerProcess(env, workdir / "worker.log").start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def tracer(worker: WorkerProcess) -> Iterator[Tracer]:
    s = worker.settings
    judged = Tracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix)
    for n in range(PAST_RUNS):  # what its runs usually are
        run = judged.request("look order 7 up", agent_name=AGENT)
        run.tool_call("get_order", success=True, args={"order_id": 7}, result="paid")
        run.tool_call("get_shipment", success=True, args={"order_id": 7}, result=f"box {n}")
        run.final("Order 7 is paid and shipped.")
        assert judged.wait_for_evaluation(run.request_id, timeout=60) is not None, worker.tail()
    yield judged
    judged.close()


class LoopingModel(BaseChatModel):
    """Looks order 7 up again and again; `obeys`: once a steer is in its input, it answers."""

    obeys: bool
    inputs: list[list[str]]

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted-looping"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        time.sleep(THINK_S)
        texts = [str(m.content) for m in messages]
        self.inputs.append(texts)
        calls = sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)
        steered = any(t.startswith(STEER_PREFIX) for t in texts)
        if (steered and self.obeys) or calls >= MAX_CALLS:
            reply = AIMessage(content="Order 7 is paid; I asked the warehouse about the box.")
        else:
            call = {"name": "get_order", "args": {"order_id": 7}, "id": f"c{calls}"}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def get_order(order_id: int) -> str:
    """Look an order up."""
    return f"order {order_id}: paid"


def run_agent(judged: Tracer, obeys: bool) -> tuple[str, list[list[str]], InterventionStop | None]:
    model = LoopingModel(obeys=obeys, inputs=[])  # (pydantic copies what it is given)
    handler = TracejudgeCallbackHandler(judged, agent_name=AGENT)
    graph = create_react_agent(
        model,
        ToolNode([get_order]),
        pre_model_hook=handler.pre_model_hook,
    )
    stopped = None
    try:
        graph.invoke(
            {"messages": [("user", "Where is order 7?")]},
            {"callbacks": [handler], "recursion_limit": 4 * MAX_CALLS},
        )
    except InterventionStop as stop:
        stopped = stop
    assert handler.last_request_id is not None
    return handler.last_request_id, model.inputs, stopped


def made(evaluation: Evaluation) -> list[tuple[str, str, bool]]:
    return [(i.crossed, i.action, i.stopped_after) for i in evaluation.interventions]


async def test_a_loop_is_steered_then_stopped_and_a_run_that_leaves_it_is_not(
    tracer: Tracer, worker: WorkerProcess
) -> None:
    rid, inputs, stopped = await asyncio.to_thread(run_agent, tracer, False)
    steered_at = [n for n, texts in enumerate(inputs) if any(STEER_PREFIX in t for t in texts)]
    # told on the third call's answer: in the fourth model call (or, arriving late, the fifth)
    assert steered_at and steered_at[0] <= 4, (inputs, worker.tail())
    assert stopped is not None and stopped.intervention.crossed == "repeated_call", worker.tail()
    assert "this run has made" in (stopped.intervention.normal or "")
    assert len(inputs) < MAX_CALLS  # ended by the stop, not by the script
    assert tracer.flush(10)
    evaluation = tracer.wait_for_evaluation(rid, timeout=60)
    assert evaluation is not None, worker.tail()
    assert made(evaluation) == [("repeated_call", "steer", False), ("repeated_call", "stop", True)]
    assert evaluation.incomplete and not evaluation.passed  # stopped before its answer

    rid, inputs, stopped = await asyncio.to_thread(run_agent, tracer, True)
    assert stopped is None, worker.tail()
    assert tracer.flush(10)
    evaluation = tracer.wait_for_evaluation(rid, timeout=60)
    assert evaluation is not None and made(evaluation) == [("repeated_call", "steer", False)]

    deadline = time.monotonic() + 30
    figures: dict[str, Any] = {}
    while time.monotonic() < deadline:
        figures = (status_json(worker).get("steers") or {}).get(AGENT, {}).get("repeated_call", {})
        if figures.get("sent") == 2:
            break
        await asyncio.sleep(1)
    assert (figures.get("sent"), figures.get("left_loop"), figures.get("stopped")) == (2, 1, 1)
