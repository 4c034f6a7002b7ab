"""The client's reflection worker on the real broker: it consumes reflection requests we
publish, and the follow-ups it starts are counted on the events topic. Two processes in one
group, one killed with -9 midway; a callback that raises, one that hangs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import consume, create_topic, produce
from tests.integration.reflection_agent import AGENT
from tests.realservices import stop_process
from tracejudge.client.events import Recorder
from tracejudge.client.reflections import Reflection, ReflectionWorker, follow_up_request_id
from tracejudge.models.outputs import ReflectionRequest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def request(n: int, *, agent: str = AGENT, round_: int = 1, goal: str = "") -> ReflectionRequest:
    return ReflectionRequest(
        reflection_id=f"refl-{uuid.uuid4().hex[:12]}-{n}",
        evaluation_id=f"eval-{n}",
        request_id=f"origin-{uuid.uuid4().hex[:8]}-{n}",
        agent_name=agent,
        goal=goal or f"book trip {n} and send the confirmation",
        summary="booked, confirmation not sent",
        remaining_steps=["send_confirmation", "update_crm"],
        suggestions=["send the confirmation e-mail"],
        reflection_round=round_,
        ts=time.time(),
    )


def publish(bootstrap: str, prefix: str, requests: list[ReflectionRequest]) -> None:
    asyncio.run(
        produce(
            bootstrap,
            prefix + "reflections",
            ((r.request_id.encode(), r.model_dump_json().encode()) for r in requests),
        )
    )


def topics(bootstrap: str, prefix: str, partitions: int = 4) -> None:
    asyncio.run(create_topic(bootstrap, prefix + "reflections", partitions))
    asyncio.run(create_topic(bootstrap, prefix + "events", partitions))


def events(
    bootstrap: str, prefix: str, until: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    records = asyncio.run(
        consume(
            bootstrap,
            prefix + "events",
            until=lambda rs: until([json.loads(r.value) for r in rs]),
            timeout_s=60,
            settle_s=2.0,
        )
    )
    return [json.loads(r.value) for r in records]


def finals(found: list[dict[str, Any]]) -> dict[str, str]:
    return {e["request_id"]: e["output"] for e in found if e["type"] == "final_response"}


def test_two_processes_one_killed_start_exactly_one_follow_up_per_request(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"refl-{uuid.uuid4().hex[:6]}."
    topics(kafka_bootstrap, prefix)
    mine = [request(n) for n in range(40)]
    others = [request(100 + n, agent="another-agent") for n in range(3)]
    beyond = [request(200, round_=3)]  # above the worker's max_rounds (2)
    publish(kafka_bootstrap, prefix, mine + others + beyond)
    calls = tmp_path / "calls.log"
    calls.touch()

    def start(name: str) -> subprocess.Popen[bytes]:
        args = [kafka_bootstrap, prefix, str(calls)]
        return subprocess.Popen(
            [sys.executable, "-m", "tests.integration.reflection_agent", *args],
            cwd=ROOT,
            stdout=(tmp_path / f"{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )

    first, second = start("first"), start("second")
    try:
        # the kill lands once both processes hold partitions: either may join the group first
        # and handle the first requests alone until the rebalance the other's join starts
        deadline = time.monotonic() + 60
        pids: Counter[str] = Counter()
        while time.monotonic() < deadline:
            pids = Counter(line.split()[1] for line in calls.read_text().splitlines())
            if pids[str(first.pid)] >= 2 and pids.total() >= 12:
                break
            time.sleep(0.05)
        first.kill()  # -9, mid-stream: some of its requests are in hand, some not yet read
        first.wait(10)
        wanted = {follow_up_request_id(r.reflection_id): r for r in mine}
        found = events(kafka_bootstrap, prefix, lambda es: wanted.keys() <= finals(es).keys())
    finally:
        stop_process(first)
        stop_process(second)
    assert str(first.pid) in pids, f"the killed process handled nothing before: {pids}"

    # every request's callback ran (the killed process's unfinished ones again, elsewhere)
    called = Counter(line.split()[0] for line in calls.read_text().splitlines())
    assert set(called) == {r.reflection_id for r in mine}
    # redone: the one in hand at the kill, and one whose commit a rebalance refused
    assert sum(called.values()) - len(mine) <= 2

    # exactly one follow-up per reflection request: one request id, linked to its origin
    started = [e for e in found if e["type"] == "task_started"]
    follow_ups = {e["request_id"] for e in started}
    assert follow_ups == set(wanted)
    for e in started:
        origin = wanted[e["request_id"]]
        assert e["parent_request_id"] == origin.request_id
        assert e["reflection_round"] == 1
        assert e["planned_steps"] == origin.remaining_steps
        assert e["agent_name"] == AGENT
        # a resend (the request in hand at the kill) is the same event: the worker drops it
        assert e["event_id"] == f"{e['request_id']}:0"
    assert len(started) - len(follow_ups) <= 2
    assert set(finals(found)) == set(wanted)
    assert all(out == "finished 2 remaining step(s)" for out in finals(found).values())
    # steps of a redone run never reuse the interrupted run's event ids
    steps = [e for e in found if e["type"] == "tool_call"]
    assert len({e["event_id"] for e in steps}) == len(steps)


def in_thread(worker: ReflectionWorker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_raising_callback_is_retried_then_reported_and_skipped(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"raise-{uuid.uuid4().hex[:6]}."
    topics(kafka_bootstrap, prefix, partitions=1)  # one partition: handled in order
    poison, flaky, fine = request(0, goal="poison"), request(1, goal="flaky"), request(2)
    publish(kafka_bootstrap, prefix, [poison, flaky, fine])
    tries: Counter[str] = Counter()

    def callback(reflection: Reflection, run: Recorder) -> str:
        tries[reflection.goal] += 1
        assert reflection.attempt == tries[reflection.goal]
        if reflection.goal == "poison":
            raise RuntimeError("the booking API is gone")
        if reflection.goal == "flaky" and reflection.attempt == 1:
            raise TimeoutError("slow API")
        assert reflection.suggestions == ("send the confirmation e-mail",)
        return "done"

    worker = ReflectionWorker(
        kafka_bootstrap,
        callback,
        agents=[AGENT],
        topic_prefix=prefix,
        attempts=3,
        retry_backoff_s=0.05,
    )
    thread = in_thread(worker)
    try:
        wait_for(lambda: worker.stats.handled == 2)
    finally:
        worker.stop()
        thread.join(30)
    assert tries == {"poison": 3, "flaky": 2, fine.goal: 1}
    assert (worker.stats.failed, worker.stats.retried) == (1, 3)
    assert f"the callback for {poison.reflection_id} failed 3 time(s)" in caplog.text

    ids = {r.goal: follow_up_request_id(r.reflection_id) for r in (poison, flaky, fine)}
    found = events(kafka_bootstrap, prefix, lambda es: len(finals(es)) == 3)
    assert finals(found) == {
        ids["poison"]: "failed: RuntimeError: the booking API is gone",
        ids["flaky"]: "done",
        ids[fine.goal]: "done",
    }
    failures = defaultdict(list)
    for e in found:
        if e["type"] == "reasoning_step":
            failures[e["request_id"]].append(e["error"])
    assert failures == {
        ids["poison"]: ["RuntimeError: the booking API is gone"] * 2,
        ids["flaky"]: ["TimeoutError: slow API"],
    }
    # committed: the group's next process starts after the three
    again = ReflectionWorker(kafka_bootstrap, callback, agents=[AGENT], topic_prefix=prefix)
    try:
        for _ in range(20):
            again.poll(0.5)
    finally:
        again.close()
    assert sum(tries.values()) == 6


def test_a_hanging_callback_is_bounded_and_the_next_request_runs(
    kafka_bootstrap: str,
) -> None:
    prefix = f"hang-{uuid.uuid4().hex[:6]}."
    topics(kafka_bootstrap, prefix, partitions=1)
    hanging, after = request(0, goal="hang"), request(1)
    publish(kafka_bootstrap, prefix, [hanging, after])
    release = threading.Event()
    late: list[Recorder] = []

    def callback(reflection: Reflection, run: Recorder) -> str:
        if reflection.goal == "hang":
            release.wait(60)
            run.tool_call("late_step", success=True)  # after the timeout: dropped
            late.append(run)
            return "too late"
        return "done"

    worker = ReflectionWorker(
        kafka_bootstrap,
        callback,
        agents=[AGENT],
        topic_prefix=prefix,
        callback_timeout_s=1.0,
    )
    thread = in_thread(worker)
    started = time.monotonic()
    try:
        wait_for(lambda: worker.stats.handled == 1, timeout_s=30)
        took = time.monotonic() - started
        assert worker.stats.timed_out == 1 and worker.stats.abandoned == 1
        release.set()
        wait_for(lambda: bool(late))
    finally:
        release.set()
        worker.stop()
        thread.join(30)
    assert took < 15  # the hang cost its timeout, not the hang
    ids = {r.goal: follow_up_request_id(r.reflection_id) for r in (hanging, after)}
    found = events(kafka_bootstrap, prefix, lambda es: len(finals(es)) == 2)
    assert finals(found) == {ids["hang"]: "failed: timed out after 1 s", ids[after.goal]: "done"}
    assert not [e for e in found if e.get("tool") == "late_step"]
    assert late[0].dropped == 1  # the late thread's step was refused, not sent


def test_an_async_callback_is_awaited_on_its_own_loop(kafka_bootstrap: str) -> None:
    prefix = f"async-{uuid.uuid4().hex[:6]}."
    topics(kafka_bootstrap, prefix, partitions=1)
    asked = request(0)
    publish(kafka_bootstrap, prefix, [asked])

    async def callback(reflection: Reflection, run: Recorder) -> str:
        await asyncio.sleep(0.05)  # an async agent's own awaits, on the callback's loop
        for step in reflection.remaining_steps:
            run.tool_call(step, success=True)
        return f"awaited {len(reflection.remaining_steps)} step(s)"

    worker = ReflectionWorker(kafka_bootstrap, callback, agents=[AGENT], topic_prefix=prefix)
    thread = in_thread(worker)
    try:
        wait_for(lambda: worker.stats.handled == 1)
    finally:
        worker.stop()
        thread.join(30)
    rid = follow_up_request_id(asked.reflection_id)
    found = events(kafka_bootstrap, prefix, lambda es: rid in finals(es))
    assert finals(found) == {rid: "awaited 2 step(s)"}
    assert [e["tool"] for e in found if e["type"] == "tool_call"] == asked.remaining_steps
