"""Interventions reach the agent on the real broker, from a real worker: a run that
calls the same tool the same way again is told to stop on the call that completes the loop;
a run over its step budget on the step that crosses it; a run doing varied work is told
nothing. The agent is the real `Tracer`; nothing of the client is stubbed."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from aiokafka import ConsumerRecord

from tests.integration.harness import WorkerProcess, consume, create_topic, produce, worker_env
from tracejudge.client import AsyncTracer, InterventionReader, InterventionStop, Recorder, Tracer
from tracejudge.models.outputs import Intervention

pytestmark = pytest.mark.integration

TOLD_WITHIN_S = 10.0  # generous for a shared CI box; the benchmark measures the real figure
QUIET_S = 1.5  # how long "nothing arrived" is watched for


@pytest.fixture(scope="module")
def intervening_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """One worker with the default loop rules stopping at their first crossing, and a step
    budget for one agent only."""
    workdir = tmp_path_factory.mktemp("intervening-worker")
    budgets = workdir / "budgets.toml"
    # a loop stops at once here, as a team may choose (the default steers first)
    budgets.write_text(
        '[default]\nloop_action = "stop"\n\n[agents."budget-agent"]\nsteps = 5\n',
        encoding="utf-8",
    )
    env = worker_env(kafka_bootstrap, redis_url, workdir, "intervene", budgets_file=str(budgets))
    worker = WorkerProcess(env, workdir / "worker.log").start()
    yield worker
    worker.stop()


@pytest.fixture
def tracer(intervening_worker: WorkerProcess) -> Iterator[Tracer]:
    s = intervening_worker.settings
    tracer = Tracer(s.kafka_bootstrap, topic_prefix=s.topic_prefix, linger_ms=0)
    yield tracer
    tracer.close()


def wait_until(check: Callable[[], bool], timeout_s: float) -> float | None:
    """Seconds until `check()` held, or None if it did not within `timeout_s`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if check():
            return time.monotonic() - started
        time.sleep(0.005)
    return None


def step(tracer: Tracer, req: Recorder, tool: str, args: object, result: object) -> None:
    req.tool_call(tool, success=True, args=args, result=result)
    assert tracer.flush(10)


def finals_of(worker: WorkerProcess, rid: str) -> list[dict[str, object]]:
    """The request's final_response events as the worker reads them."""

    def finals(records: list[ConsumerRecord]) -> list[dict[str, object]]:
        values = [json.loads(r.value) for r in records if r.key == rid.encode()]
        return [v for v in values if v["type"] == "final_response"]

    s = worker.settings
    return finals(
        asyncio.run(
            consume(
                s.kafka_bootstrap,
                s.topic("events"),
                until=lambda rs: bool(finals(rs)),
                timeout_s=20,
            )
        )
    )


def test_a_looping_agent_is_told_to_stop_on_the_call_that_completes_the_loop(
    tracer: Tracer, intervening_worker: WorkerProcess
) -> None:
    told: list[tuple[Intervention, str]] = []
    req = tracer.request(
        "find the flaky test",
        agent_name="loop-agent",
        on_intervention=lambda i: told.append((i, threading.current_thread().name)),
    )
    for _ in range(2):
        step(tracer, req, "run_tests", {"path": "tests/"}, "1 failed: test_cache")
    assert wait_until(req.should_stop, QUIET_S) is None  # two alike are not a loop
    assert req.interventions == [] and req.stop_reason is None

    step(tracer, req, "run_tests", {"path": "tests/"}, "1 failed: test_cache")  # the 3rd
    waited = wait_until(req.should_stop, TOLD_WITHIN_S)
    assert waited is not None, intervening_worker.tail()

    stop = req.stop_reason
    assert stop is not None and stop.kind == "loop" and stop.crossed == "repeated_call"
    assert stop.action == "stop" and stop.request_id == req.request_id
    assert stop.step_index == 3  # task_started is 0: the third call crossed
    assert req.interventions == [stop]
    with pytest.raises(InterventionStop) as raised:
        req.raise_if_stopped()
    assert raised.value.intervention == stop and str(raised.value) == stop.message

    # the same intervention again (a worker redoing its batch after a crash): told once
    s = intervening_worker.settings
    again = (req.request_id.encode(), stop.model_dump_json().encode())
    asyncio.run(produce(s.kafka_bootstrap, s.topic("control"), [again]))
    time.sleep(QUIET_S)
    assert [(i.intervention_id, where) for i, where in told] == [
        (stop.intervention_id, "tracejudge-interventions")  # on the reader's thread
    ]
    req.final(
        "stopped: the same test run kept failing the same way", stopped_by=stop.intervention_id
    )
    assert tracer.flush(10)

    assert [f["stopped_by"] for f in finals_of(intervening_worker, req.request_id)] == [
        stop.intervention_id
    ]


def test_a_run_doing_varied_work_is_told_nothing(tracer: Tracer) -> None:
    req = tracer.request("summarise the changelog", agent_name="loop-agent")
    for i in range(12):  # more steps than any loop rule needs, each learning something new
        step(tracer, req, "read_file", {"path": f"docs/{i}.md"}, f"section {i}: {i * 7} lines")
    req.final("The changelog has twelve sections.")
    assert tracer.flush(10)
    evaluation = tracer.wait_for_evaluation(req.request_id, timeout=30)
    assert evaluation is not None  # every event was seen by the worker by now
    assert wait_until(lambda: bool(req.interventions), QUIET_S) is None
    assert not req.should_stop() and req.stop_reason is None


def test_a_run_over_its_step_budget_is_told_on_the_step_that_crosses(tracer: Tracer) -> None:
    req = tracer.request("migrate the schema", agent_name="budget-agent")
    for i in range(5):  # the budget's 5 steps: allowed
        step(tracer, req, "edit", {"file": f"m{i}.sql"}, f"edited m{i}.sql")
    assert wait_until(req.should_stop, QUIET_S) is None
    req.reasoning("one more migration to write")  # the 6th step, a reasoning one
    assert tracer.flush(10)
    assert wait_until(req.should_stop, TOLD_WITHIN_S) is not None
    stop = req.stop_reason
    assert stop is not None and stop.kind == "budget" and stop.crossed == "steps"
    assert (stop.allowed, stop.used, stop.step_index) == (5, 6, 6)
    req.final("stopped: over the step budget", stopped_by=stop.intervention_id)


def test_a_traced_block_left_by_raise_if_stopped_records_the_stop(
    tracer: Tracer, intervening_worker: WorkerProcess
) -> None:
    with pytest.raises(InterventionStop), tracer.traced("poll the job", agent_name="a") as req:
        for _ in range(10):  # bounded: the loop rule crosses on the third
            step(tracer, req, "job_status", {"id": 7}, "running")
            wait_until(req.should_stop, 2.0)
            req.raise_if_stopped()
    assert req.finished and req.stop_reason is not None
    assert tracer.flush(10)
    [final] = finals_of(intervening_worker, req.request_id)
    assert final["stopped_by"] == req.stop_reason.intervention_id
    assert str(final["output"]).startswith("stopped: ")


async def test_an_async_agent_hears_of_it_in_its_event_loop(
    intervening_worker: WorkerProcess,
) -> None:
    s = intervening_worker.settings
    loop = asyncio.get_running_loop()
    heard: asyncio.Queue[Intervention] = asyncio.Queue()
    async with AsyncTracer(s.kafka_bootstrap, topic_prefix=s.topic_prefix, linger_ms=0) as tracer:
        req = tracer.request(
            "wait for the deploy",
            agent_name="async-agent",
            on_intervention=lambda i: loop.call_soon_threadsafe(heard.put_nowait, i),
        )
        for _ in range(3):
            req.tool_call("deploy_status", success=False, args="prod", error="HTTP 503")
        assert await tracer.flush(10)
        told = await asyncio.wait_for(heard.get(), TOLD_WITHIN_S)
        assert told.kind == "loop" and req.should_stop()
        req.final("stopped", stopped_by=told.intervention_id)


def control_message(rid: str) -> tuple[bytes, bytes]:
    value = Intervention(
        intervention_id=f"{rid}-budget-steps",
        request_id=rid,
        kind="budget",
        crossed="steps",
        allowed=5,
        used=6,
        evidence="steps 6 over the budget's 5",
        action="stop",
        message="stop",
        ts=time.time(),
    )
    return rid.encode(), value.model_dump_json().encode()


def test_one_published_while_the_reader_connected_is_not_missed(kafka_bootstrap: str) -> None:
    """The reader starts from a few seconds before it was started, not from the end."""
    topic = f"it-lookback-{uuid.uuid4().hex[:6]}.control"
    asyncio.run(create_topic(kafka_bootstrap, topic, 3))
    rid = uuid.uuid4().hex
    asyncio.run(produce(kafka_bootstrap, topic, [control_message(rid)]))
    reader = InterventionReader(kafka_bootstrap, topic)
    try:
        watch = reader.watch(rid)  # the reader starts now, after the intervention went out
        assert wait_until(lambda: watch.stop is not None, TOLD_WITHIN_S) is not None
    finally:
        reader.close()


def test_a_control_topic_made_after_the_reader_started_is_read(kafka_bootstrap: str) -> None:
    topic = f"it-late-{uuid.uuid4().hex[:6]}.control"
    reader = InterventionReader(kafka_bootstrap, topic, warn_interval_s=3600)
    try:
        rid = uuid.uuid4().hex
        watch = reader.watch(rid)
        time.sleep(1.0)  # the reader finds no topic, and retries
        assert reader.running and watch.stop is None
        asyncio.run(create_topic(kafka_bootstrap, topic, 3))
        asyncio.run(produce(kafka_bootstrap, topic, [control_message(rid)]))
        assert wait_until(lambda: watch.stop is not None, TOLD_WITHIN_S) is not None
    finally:
        reader.close()


# A new producer's first events waited for its producer id: 0.5 s, or 1 s, where later ones
# take milliseconds (client/transport.py `_prime`); the bound leaves room for the two
# connections a new client makes, on a busy box
FIRST_WITHIN_S = 0.3


def test_a_new_tracers_first_event_leaves_without_waiting_for_its_producer_id(
    kafka_bootstrap: str,
) -> None:
    prefix = f"it-first-{uuid.uuid4().hex[:6]}."
    asyncio.run(create_topic(kafka_bootstrap, prefix + "events", 3))
    tracer = Tracer(kafka_bootstrap, topic_prefix=prefix, interventions=False)
    try:
        tracer.request("the first request of a new tracer", agent_name="a")  # task_started
        delivered = wait_until(lambda: tracer.sent >= 1, 10)
        assert delivered is not None and delivered < FIRST_WITHIN_S, delivered
    finally:
        tracer.close()


def told_after_crossing(tracer: Tracer) -> float:
    """Three identical calls handed over at once: seconds from the third (the loop rule's
    crossing) to the recorder being told to stop."""
    req = tracer.request("poll the job", agent_name="loop-agent")
    for _ in range(3):
        req.tool_call("job_status", success=True, args={"id": 7}, result="running")
    waited = wait_until(req.should_stop, TOLD_WITHIN_S)
    assert waited is not None and req.stop_reason is not None
    req.final("stopped", stopped_by=req.stop_reason.intervention_id)
    return waited


def test_a_new_tracers_first_request_is_told_as_soon_as_its_later_ones(
    intervening_worker: WorkerProcess,
) -> None:
    """The first request starts the tracer's producer and its interventions reader: told of its
    stop within FIRST_WITHIN_S of the later requests' time, not 0.5-1 s after it."""
    s = intervening_worker.settings
    tracer = Tracer(s.kafka_bootstrap, topic_prefix=s.topic_prefix)  # an agent's defaults
    try:
        first = told_after_crossing(tracer)
        later = sorted(told_after_crossing(tracer) for _ in range(3))
    finally:
        tracer.close()
    assert first < later[1] + FIRST_WITHIN_S, (first, later)
