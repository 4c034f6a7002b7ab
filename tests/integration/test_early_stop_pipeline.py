"""Early stop decisions on the real broker and in Redis."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest

from tests.integration.harness import WorkerProcess, consume, grouped, produce_events
from tracejudge.client.early_stop import AsyncEarlyStopClient, EarlyStopClient

pytestmark = pytest.mark.integration
CONCLUSION = "<Conclusion>The cache was cold; warming it fixes the latency.</Conclusion>"


def rounds(
    rid: str,
    responses: list[str],
    observations: list[str] | None = None,
    max_iterations: int = 5,
    exec_success: bool | None = True,
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": rid, "goal": "Find why p99 latency doubled"}
    ]
    for i, response in enumerate(responses, start=1):
        events.append(
            {
                "type": "iteration",
                "request_id": rid,
                "step_index": i,
                "iteration": i,
                "max_iterations": max_iterations,
                "response": response,
                "observation": (observations or [""] * len(responses))[i - 1],
                "exec_success": exec_success,
            }
        )
    return events


async def decisions(
    worker: WorkerProcess, rids: set[str], settle_s: float = 2.0
) -> dict[str, list[dict[str, Any]]]:
    return await grouped(worker, "control", rids, timeout_s=20, settle_s=settle_s)


async def test_early_stop_decisions_in_kafka_and_redis(pipeline_worker: WorkerProcess) -> None:
    run = uuid.uuid4().hex[:6]
    done, never, observed = f"done-{run}", f"never-{run}", f"observed-{run}"
    bootstrap = pipeline_worker.settings.kafka_bootstrap
    topic = pipeline_worker.topic("events")
    done_events = rounds(done, ["hypothesis", "experiment " + CONCLUSION])
    await produce_events(
        bootstrap,
        topic,
        done_events
        + rounds(never, ["h", "e", "o", "i", "c"], exec_success=None)
        + rounds(
            observed,
            ["h", "run the job", "write it up " + CONCLUSION],
            ["", "Saved successfully. 0 errors.", ""],
        ),
    )
    # the same iteration events again: no second decision
    await produce_events(bootstrap, topic, done_events[1:])
    # the loop runs one more round after the stop, then answers: sent as soon as the stop is
    # out, before the checks below, so that the window (idle timeout 2 s) is still open
    await grouped(pipeline_worker, "control", {done}, wait_for_all=True, timeout_s=20, settle_s=0)
    await produce_events(
        bootstrap,
        topic,
        [
            {
                "type": "iteration",
                "request_id": done,
                "step_index": 3,
                "iteration": 3,
                "max_iterations": 5,
                "response": "more",
                "exec_success": True,
            },
            {
                "type": "final_response",
                "request_id": done,
                "output": "The cache was cold after deploys; warming it fixed p99 (210 ms).",
            },
        ],
    )
    found = await decisions(pipeline_worker, {done, never, observed})
    [stop] = found[done]
    assert (stop["iteration"], stop["action"], stop["reason"]) == (2, "stop", "conclusion")
    assert "cache was cold" in stop["evidence"]
    assert found[never] == []
    [finalize] = found[observed]  # at most one stop/finalize: the later conclusion adds none
    assert (finalize["iteration"], finalize["action"], finalize["reason"]) == (
        2,
        "finalize",
        "observation_success",
    )

    client = EarlyStopClient(pipeline_worker.settings.redis_url)
    checked = client.check(done)
    assert checked is not None and checked.model_dump() == stop
    assert client.check(never) is None
    async_client = AsyncEarlyStopClient(pipeline_worker.settings.redis_url)
    assert (await async_client.check(observed)) is not None
    await async_client.aclose()

    # (the loop's one more round after the stop, and its answer, went in above)
    deadline = time.monotonic() + 30
    evaluation = None
    while evaluation is None and time.monotonic() < deadline:
        records = await consume(
            bootstrap, pipeline_worker.topic("evaluations"), until=lambda r: True, timeout_s=5
        )
        evaluation = next(
            (json.loads(r.value) for r in records if json.loads(r.value)["request_id"] == done),
            None,
        )
        await asyncio.sleep(0.2)
    assert evaluation is not None
    assert (
        evaluation["iterations_used"],
        evaluation["max_iterations"],
        evaluation["stopped_early"],
    ) == (3, 5, True)
    assert any("after tracejudge said it could stop" in r for r in evaluation["reasons"])
    assert evaluation["dimension_scores"]["efficiency"] < 100
