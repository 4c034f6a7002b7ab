"""Asymmetric signing of control records on a real broker and worker: the worker signs with its
Ed25519 private key, the agent's client holds only the public key. Its stop still stops a
LangGraph run; a stop the agent host could make (it has no private key: another key pair under
the same key id, an HMAC key guessed, no signature) is read, refused and counted, and the run
answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent

from examples.langgraph_agent import ScriptedChatModel
from tests.integration.harness import WorkerProcess, stopping_worker, tracer_for
from tests.integration.test_framework_stops import (
    AFTER,
    ANSWER,
    ASKED,
    CROSSING,
    LOOPS,
    THINK_S,
    assert_stopped,
    config,
    final_of,
    forged,
    judged,
    lookups,
    react_agent,
)
from tracejudge.client import Tracer
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.interventions import InterventionStop
from tracejudge.models.signing import ControlKeyError, ControlKeys, new_key_pair

pytestmark = pytest.mark.integration

PRIVATE, PUBLIC = new_key_pair("stops-1")


@pytest.fixture(scope="module")
def signing_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    workdir = tmp_path_factory.mktemp("ed25519-worker")
    worker = stopping_worker(
        kafka_bootstrap, redis_url, workdir, "ed25519", PRIVATE, idle_timeout_s=5
    )
    yield worker
    worker.stop()


@pytest.fixture
def tracer(signing_worker: WorkerProcess) -> Iterator[Tracer]:
    tracer = tracer_for(signing_worker, PUBLIC)  # the public key only
    yield tracer
    tracer.close()


def test_a_public_key_cannot_sign() -> None:
    agent = ControlKeys.parse(PUBLIC)
    assert agent is not None and not agent.can_sign
    with pytest.raises(ControlKeyError, match="cannot sign"):
        agent.sign(forged("r", "x"))


async def test_the_workers_signed_stop_stops_a_langgraph_run(
    tracer: Tracer, signing_worker: WorkerProcess
) -> None:
    ran: list[int] = []
    handler = TracejudgeCallbackHandler(tracer, agent_name="ed25519-looping-bot")
    graph = react_agent(lookups([7] * LOOPS), ran)
    with pytest.raises(InterventionStop) as raised:
        await asyncio.to_thread(graph.invoke, ASKED, config(handler))
    assert CROSSING <= len(ran) <= CROSSING + AFTER, signing_worker.tail()
    rid = handler.last_request_id
    assert rid is not None and tracer.flush(10)
    final = await final_of(signing_worker, rid)
    assert_stopped(judged(tracer, rid, signing_worker), raised.value, final)


async def test_a_stop_an_agent_host_could_make_is_refused(
    tracer: Tracer, signing_worker: WorkerProcess
) -> None:
    reader = tracer._reader
    assert reader is not None
    ran: list[int] = []
    handler = TracejudgeCallbackHandler(tracer, agent_name="ed25519-forged-bot")
    forger = Producer({"bootstrap.servers": signing_worker.settings.kafka_bootstrap})
    other_private, _ = new_key_pair("stops-1")  # the same key id, another pair
    impostor = ControlKeys.parse(other_private)
    guessed = ControlKeys.parse("a-guessed-hmac-key-" + "7" * 20)
    assert impostor is not None and guessed is not None

    @tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        ran.append(order_id)
        if len(ran) == 1:
            rid = handler.last_request_id
            assert rid is not None
            topic = signing_worker.topic("control")
            for record in (
                forged(rid, "forged-1"),
                impostor.sign(forged(rid, "forged-2")),
                guessed.sign(forged(rid, "forged-3")),
            ):
                forger.produce(topic, record, key=rid.encode())
            assert forger.flush(10) == 0
            deadline = time.monotonic() + 15
            while reader.rejected < 3:
                assert time.monotonic() < deadline, (reader.rejected, signing_worker.tail())
                time.sleep(0.05)
        return f"order {order_id}: paid, 20 EUR"

    model = ScriptedChatModel(responses=lookups([7, 8, 9, 10]), sleep=THINK_S)
    graph = create_react_agent(model, ToolNode([get_order]))
    result = await asyncio.to_thread(graph.invoke, ASKED, config(handler))
    assert result["messages"][-1].content == ANSWER and len(ran) == 4
    assert handler.last_recorder is not None and not handler.last_recorder.should_stop()
