"""The framework integrations with the real frameworks from PyPI, driven by their own fake or
scripted models (no network): the events they produce, and the evaluation a real worker sends
back for them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from agents import (
    Agent,
    RunConfig,
    Runner,
    function_tool,
    generation_span,
    set_trace_processors,
    trace,
)
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from examples.langgraph_agent import ScriptedChatModel
from examples.openai_agents_agent import ScriptedModel, call, say
from tests.integration.harness import WorkerProcess, consume, produce, tracer_for, values
from tests.realservices import ROOT
from tracejudge.client.events import Recorder
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.integrations.openai_agents import (
    DEFAULT_WORKFLOW_NAME,
    TracejudgeProcessor,
)
from tracejudge.client.integrations.otel import TracejudgeSpanProcessor
from tracejudge.client.reflections import Reflection, ReflectionWorker, follow_up_request_id
from tracejudge.models.outputs import ReflectionRequest

pytestmark = pytest.mark.integration


async def events_of_request(worker: WorkerProcess, rid: str, count: int) -> list[dict[str, Any]]:
    records = await consume(
        worker.settings.kafka_bootstrap,
        worker.topic("events"),
        until=lambda rs: sum(1 for v in values(rs) if v.get("request_id") == rid) >= count,
        timeout_s=30,
    )
    return [v for v in values(records) if v.get("request_id") == rid]


async def test_an_opentelemetry_instrumented_agent_is_judged_in_process(
    pipeline_worker: WorkerProcess,
) -> None:
    tracer = tracer_for(pipeline_worker)
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-bot"}))
    provider.add_span_processor(TracejudgeSpanProcessor(tracer))
    otel = provider.get_tracer("otel-bot")
    agent = f"otel-bot-{uuid.uuid4().hex[:6]}"
    with otel.start_as_current_span(
        f"invoke_agent {agent}",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent},
    ) as root:
        with otel.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 700,
                "gen_ai.usage.output_tokens": 25,
            },
        ):
            pass
        with otel.start_as_current_span(
            "execute_tool refund",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund"},
        ) as refund:
            refund.set_status(Status(StatusCode.ERROR, "payment gateway timeout"))
    rid = f"otel-{root.get_span_context().trace_id:032x}"
    assert provider.force_flush(10_000)
    kinds = [e["type"] for e in await events_of_request(pipeline_worker, rid, 4)]
    assert sorted(kinds) == ["final_response", "reasoning_step", "task_started", "tool_call"]
    evaluation = tracer.wait_for_evaluation(rid, timeout=30)
    tracer.close()
    assert evaluation is not None and evaluation.closed_by == "final_response"
    assert evaluation.success is False and evaluation.failed_steps[0].tool == "refund"
    assert evaluation.usage is not None and evaluation.usage.input_tokens == 700
    assert evaluation.agent_name == agent


async def test_a_langgraph_agent_is_judged_through_the_callback_handler(
    pipeline_worker: WorkerProcess,
) -> None:
    @tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        return f"order {order_id}: paid, 20 EUR"

    @tool
    def refund(order_id: int) -> str:
        """Refund an order."""
        raise RuntimeError("payment gateway timeout")

    def usage(tokens_in: int, tokens_out: int) -> dict[str, int]:
        return {"input_tokens": tokens_in, "output_tokens": tokens_out, "total_tokens": 0}

    script = [
        AIMessage(
            content="",
            tool_calls=[{"name": "get_order", "args": {"order_id": 7}, "id": "c1"}],
            usage_metadata=usage(120, 15),  # type: ignore[arg-type]
            response_metadata={"model_name": "scripted-gpt"},
        ),
        AIMessage(
            content="",
            tool_calls=[{"name": "refund", "args": {"order_id": 7}, "id": "c2"}],
            usage_metadata=usage(180, 12),  # type: ignore[arg-type]
            response_metadata={"model_name": "scripted-gpt"},
        ),
        AIMessage(
            content="I could not refund order 7: the payment gateway timed out.",
            usage_metadata=usage(230, 20),  # type: ignore[arg-type]
            response_metadata={"model_name": "scripted-gpt"},
        ),
    ]
    agent_name = f"lc-bot-{uuid.uuid4().hex[:6]}"
    tracer = tracer_for(pipeline_worker)
    handler = TracejudgeCallbackHandler(tracer, agent_name=agent_name)
    tools = ToolNode([get_order, refund], handle_tool_errors=True)  # the model sees the error
    graph = create_react_agent(ScriptedChatModel(responses=script), tools)
    asked: Any = {"messages": [("user", "Refund order 7, please")]}
    await asyncio.to_thread(lambda: graph.invoke(asked, {"callbacks": [handler]}))
    rid = handler.last_request_id
    assert rid is not None and tracer.flush(10)
    events = await events_of_request(pipeline_worker, rid, 7)
    assert [e["type"] for e in events] == [
        "task_started",
        "reasoning_step",
        "tool_call",
        "reasoning_step",
        "tool_call",
        "reasoning_step",
        "final_response",
    ]
    assert events[0]["goal"] == "Refund order 7, please"
    calls = [e for e in events if e["type"] == "tool_call"]
    assert [(c["tool"], c["success"]) for c in calls] == [("get_order", True), ("refund", False)]
    assert "payment gateway timeout" in calls[1]["error"]
    assert events[-1]["output"].startswith("I could not refund order 7")
    evaluation = tracer.wait_for_evaluation(rid, timeout=30)
    tracer.close()
    assert evaluation is not None and evaluation.agent_name == agent_name
    assert evaluation.success is False  # the refund failed and was not recovered
    assert evaluation.usage is not None and evaluation.usage.model_calls == 3
    assert evaluation.usage.input_tokens == 530 and evaluation.usage.models == ["scripted-gpt"]


async def test_an_openai_agents_sdk_run_is_judged_through_its_tracing_processor(
    pipeline_worker: WorkerProcess,
) -> None:
    @function_tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        return f"order {order_id}: paid, 20 EUR"

    answer = "Order 7 is paid: 20 EUR, on the card ending 4242."
    model = ScriptedModel(
        [
            (
                [
                    ResponseFunctionToolCall(
                        arguments='{"order_id": 7}',
                        call_id="c1",
                        name="get_order",
                        type="function_call",
                        id="fc1",
                        status="completed",
                    )
                ],
                150,
                18,
            ),
            (
                [
                    ResponseOutputMessage(
                        id="m1",
                        content=[
                            ResponseOutputText(text=answer, type="output_text", annotations=[])
                        ],
                        role="assistant",
                        status="completed",
                        type="message",
                    )
                ],
                210,
                25,
            ),
        ]
    )
    tracer = tracer_for(pipeline_worker)
    processor = TracejudgeProcessor(tracer)
    set_trace_processors([processor])  # ours only: the SDK's default exporter goes to OpenAI
    agent_name = f"oai-bot-{uuid.uuid4().hex[:6]}"
    agent = Agent(name=agent_name, instructions="Help with orders.", model=model, tools=[get_order])
    result = await Runner.run(agent, "Is order 7 paid?")
    assert result.final_output == answer
    rid = processor.last_request_id
    assert rid is not None and tracer.flush(10)
    events = await events_of_request(pipeline_worker, rid, 5)
    assert [e["type"] for e in events] == [
        "task_started",
        "reasoning_step",
        "tool_call",
        "reasoning_step",
        "final_response",
    ]
    assert events[0]["goal"] == "Is order 7 paid?"
    assert events[2]["tool"] == "get_order" and events[2]["success"] is True
    assert events[-1]["output"] == answer
    # the agent's own name, not the SDK's default workflow name every run has
    assert {e["agent_name"] for e in events} == {agent_name}
    evaluation = tracer.wait_for_evaluation(rid, timeout=30)
    tracer.close()
    assert evaluation is not None and evaluation.success and not evaluation.incomplete
    assert evaluation.agent_name == agent_name
    assert evaluation.usage is not None and evaluation.usage.input_tokens == 360


async def test_an_openai_agents_sdk_trace_without_an_agent_is_named_by_its_workflow(
    pipeline_worker: WorkerProcess,
) -> None:
    # model calls traced by hand, with no Runner and so no agent span: the trace's workflow
    # name is the agent's when the caller chose it, and no name at all when it is the default
    tracer = tracer_for(pipeline_worker)
    processor = TracejudgeProcessor(tracer)
    set_trace_processors([processor])
    workflow = f"nightly-digest-{uuid.uuid4().hex[:6]}"
    rids = []
    for name in (workflow, DEFAULT_WORKFLOW_NAME):
        with (
            trace(name),
            generation_span(
                input=[{"role": "user", "content": "Summarise the night's incidents."}],
                output=[{"role": "assistant", "content": "No incident overnight."}],
                model="scripted-gpt",
            ),
        ):
            pass
        rids.append(processor.last_request_id)
    assert None not in rids and len(set(rids)) == 2 and tracer.flush(10)
    named, unnamed = [await events_of_request(pipeline_worker, str(r), 3) for r in rids]
    tracer.close()
    assert DEFAULT_WORKFLOW_NAME == "Agent workflow"  # the SDK's, read from its RunConfig
    assert {e["agent_name"] for e in named} == {workflow}
    assert {e.get("agent_name") for e in unnamed} <= {None, ""}
    assert [e["type"] for e in unnamed] == ["task_started", "reasoning_step", "final_response"]


def run_example(
    worker: WorkerProcess, *command: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m examples.NAME ...` from the repository root against `worker`, as the
    examples' README says to run them."""
    s = worker.settings
    return subprocess.run(
        [sys.executable, "-m", *command],
        cwd=ROOT,
        env={
            **os.environ,
            "TRACEJUDGE_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
            "TRACEJUDGE_TOPIC_PREFIX": s.topic_prefix,
        },
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.mark.parametrize("example", ["otel_agent", "langgraph_agent", "openai_agents_agent"])
def test_each_example_runs_as_the_readme_says(pipeline_worker: WorkerProcess, example: str) -> None:
    done = run_example(pipeline_worker, f"examples.{example}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert ": score " in done.stdout and "usage:" in done.stdout


def test_the_loop_example_is_stopped_while_it_runs(pipeline_worker: WorkerProcess) -> None:
    done = run_example(pipeline_worker, "examples.langgraph_loop_stop")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "stopped by tracejudge: loop repeated_call at step " in done.stdout, done.stdout
    assert "intervention: loop repeated_call (stop) at step " in done.stdout
    assert done.stdout.rstrip().endswith(": stopped"), done.stdout
    assert "no intervention came" not in done.stderr


def test_the_reflection_example_finishes_what_its_langgraph_agent_skipped(
    pipeline_worker: WorkerProcess,
) -> None:
    done = run_example(
        pipeline_worker, "examples.langgraph_reflection", "--orders", "4", timeout_s=180
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    # orders 1 and 3 forget the confirmation: judged incomplete, the step left named
    assert sum("incomplete True (left: send_confirmation)" in line for line in lines) == 2
    assert "2 follow-up(s) run for 2 incomplete order(s)" in lines
    finished = [line for line in lines if line.startswith("follow-up ") and "(round 1" in line]
    assert len(finished) == 2
    assert all("incomplete False, final for its chain True" in line for line in finished)


async def test_an_openai_agents_sdk_run_records_into_a_reflections_follow_up(
    pipeline_worker: WorkerProcess,
) -> None:
    """The Agents SDK route of a reflection worker: the callback runs the agent with the
    processor `recording_into` the follow-up, so the SDK's calls are the follow-up's steps."""

    @function_tool
    def send_confirmation(order_id: int) -> str:
        """E-mail the customer."""
        return f"order {order_id}: confirmation sent"

    tracer = tracer_for(pipeline_worker)
    processor = TracejudgeProcessor(tracer)
    set_trace_processors([processor])
    agent_name = f"oai-reflect-{uuid.uuid4().hex[:6]}"
    request = ReflectionRequest(
        reflection_id=f"refl-{uuid.uuid4().hex[:12]}",
        evaluation_id="eval-1",
        request_id=f"origin-{uuid.uuid4().hex[:8]}",
        agent_name=agent_name,
        goal="Refund order 7 and confirm it",
        summary="refunded, confirmation not sent",
        remaining_steps=["send_confirmation"],
        reflection_round=1,
        ts=time.time(),
    )

    def finish(reflection: Reflection, run: Recorder) -> str:
        script: list[tuple[list[Any], int, int]] = [
            ([call("send_confirmation", '{"order_id": 7}')], 120, 10),
            ([say("Confirmation sent for order 7.")], 160, 12),
        ]
        agent = Agent(
            name=agent_name,
            instructions="Finish: " + ", ".join(reflection.remaining_steps),
            model=ScriptedModel(script),
            tools=[send_confirmation],
        )
        with processor.recording_into(run) as metadata:
            result = Runner.run_sync(
                agent, reflection.goal, run_config=RunConfig(trace_metadata=metadata)
            )
        return str(result.final_output)

    await produce(
        pipeline_worker.settings.kafka_bootstrap,
        pipeline_worker.topic("reflections"),
        [(request.request_id.encode(), request.model_dump_json().encode())],
    )
    worker = ReflectionWorker(
        pipeline_worker.settings.kafka_bootstrap,
        finish,
        agents=[agent_name],
        topic_prefix=pipeline_worker.settings.topic_prefix,
        tracer=tracer,
    )
    try:
        await asyncio.to_thread(
            lambda: [worker.poll(1.0) for _ in range(60) if worker.stats.handled == 0]
        )
    finally:
        worker.close()
    assert worker.stats.handled == 1 and tracer.flush(10)
    rid = follow_up_request_id(request.reflection_id)
    events = await events_of_request(pipeline_worker, rid, 5)
    tracer.close()
    assert [e["type"] for e in events] == [
        "task_started",
        "reasoning_step",
        "tool_call",
        "reasoning_step",
        "final_response",
    ]
    assert events[0]["parent_request_id"] == request.request_id
    assert events[0]["planned_steps"] == ["send_confirmation"]
    assert events[2]["tool"] == "send_confirmation" and events[2]["success"] is True
    assert events[-1]["output"] == "Confirmation sent for order 7."
    assert processor.last_request_id != rid  # no request of its own for the SDK's trace
