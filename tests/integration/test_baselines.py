"""An agent's normal survives a kill -9 and moves with its partitions to another worker."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import WorkerProcess, consume, produce_events, worker_env
from tests.realservices import free_port

pytestmark = pytest.mark.integration
LEARN = 12  # runs learned before the kill (the minimum is 10)


def run(rid: str, agent: str, calls: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": rid, "agent_name": agent, "goal": "look it up"}
    ]
    for i in range(calls):
        events.append(
            {
                "type": "tool_call",
                "request_id": rid,
                "step_index": i + 1,
                "tool": f"lookup_{i}",
                "args_summary": f"{{'page': {i}}}",
                "success": True,
            }
        )
    events.append(
        {
            "type": "final_response",
            "request_id": rid,
            "step_index": calls + 1,
            "output": "Order 7 was found: it shipped on May 2 and arrives on Friday.",
        }
    )
    return events


async def evaluations(worker: WorkerProcess, rids: set[str]) -> dict[str, dict[str, Any]]:
    records = await consume(
        worker.settings.kafka_bootstrap,
        worker.topic("evaluations"),
        until=lambda rs: {json.loads(r.value)["request_id"] for r in rs} >= rids,
        timeout_s=120,
    )
    found = {json.loads(r.value)["request_id"]: json.loads(r.value) for r in records}
    assert set(found) >= rids, worker.tail()
    return found


async def test_a_baseline_survives_kill_9_and_a_rebalance_to_another_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    base = worker_env(kafka_bootstrap, redis_url, tmp_path, "norms", baseline_min_runs=10)
    first, second = (
        WorkerProcess(
            {**base, "TRACEJUDGE_WEB_PORT": str(free_port()), "TRACEJUDGE_DATA_DIR": str(d)},
            tmp_path / f"worker-{d.name}.log",
        )
        for d in (tmp_path / "a", tmp_path / "b")
    )
    tag = uuid.uuid4().hex[:6]
    agent = f"support-bot-{tag}"
    learned = {f"{tag}-learn-{i}" for i in range(LEARN)}
    try:
        first.start(timeout_s=180)
        topic = first.topic("events")
        for rid in sorted(learned):
            await produce_events(kafka_bootstrap, topic, run(rid, agent, calls=2))
        await evaluations(first, learned)
        # the book writes each baseline at most once a second, the rest by the timer's marker
        deadline = time.monotonic() + 30
        while first.health()[1].get("counters", {}).get("baselines_written", 0) == 0:
            assert time.monotonic() < deadline, first.tail()
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.5)
        first.kill9()
        # past the group's session timeout (10 s): the dead worker leaves the group, and the next
        # one is given every partition at once (with some only, it would judge against the
        # runs of those only: each worker's baseline is the sample its partitions saw)
        await asyncio.sleep(11)
        # another worker, another data directory: all it knows comes from the changelog
        second.start(timeout_s=180)
        usual, long = f"{tag}-usual", f"{tag}-long"
        await produce_events(kafka_bootstrap, topic, run(usual, agent, calls=2))
        await produce_events(kafka_bootstrap, topic, run(long, agent, calls=20))
        other = f"{tag}-other-agent"  # never seen: still learning, nothing relative
        await produce_events(kafka_bootstrap, topic, run(other, f"new-{tag}", calls=20))
        found = await evaluations(second, {usual, long, other})
    finally:
        first.stop()
        second.stop()
    rules = {rid: [f["rule"] for f in e["findings"]] for rid, e in found.items()}
    assert "long_for_agent" in rules[long], (found[long]["reasons"], second.tail())
    evidence = next(f["evidence"] for f in found[long]["findings"] if f["rule"] == "long_for_agent")
    assert f"{LEARN} runs" in evidence or f"{LEARN + 1} runs" in evidence, evidence
    assert "long_for_agent" not in rules[usual]
    assert not any("still being learned" in r for r in found[usual]["reasons"])
    assert "long_for_agent" not in rules[other]
    assert any("still being learned" in r for r in found[other]["reasons"])
