"""A request sent to the LLM judge has a verdict at once: the rules', pending, replaced by the
judge's under the same evaluation_id, whose reflection and alerts come with it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fake_llm import FakeLLM, tool_call_reply, verdict
from tests.memory import MemoryWorker, memory_worker
from tracejudge.models import names
from tracejudge.streams.cli.render import render as tail_render
from tracejudge.streams.explorer.show import render as show_render
from tracejudge.streams.explorer.store import VerdictStore


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def run(rid: str) -> list[dict[str, Any]]:
    """A run the rules find done (its one call succeeded, its answer is substantive)."""
    return [
        {"type": "task_started", "request_id": rid, "goal": "book a flight", "step_index": 0},
        {"type": "tool_call", "request_id": rid, "step_index": 1, "tool": "book", "success": True},
        {"type": "final_response", "request_id": rid, "step_index": 2, "output": "Booked UA 12."},
    ]


async def judge_all(w: MemoryWorker) -> None:
    assert w.ctx.judge_jobs is not None
    try:
        for job in w.channel("judge_requests").values():
            await w.ctx.errors.run(w.record(names.JUDGE_REQUESTS, job), w.ctx.judge_jobs)
    finally:
        await w.ctx.judge_jobs.aclose()


def stored(w: MemoryWorker, rid: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        w.lookup.data[names.REDIS_EVALUATION_KEY.format(request_id=rid)]
    )
    return found


async def test_the_judges_verdict_replaces_the_pending_one_and_brings_the_actions(
    fake: FakeLLM,
) -> None:
    # the judge sees what the rules cannot: the booking is not what was asked
    fake.script = lambda body, n: tool_call_reply(verdict(False, True, score=20))
    w = memory_worker(llm_judge_enabled=True, llm_base_url=fake.base_url, llm_sample_rate=1.0)
    for event in run("r1"):
        await w.event(event)
    (pending,) = w.channel("evaluations").values()
    assert (pending["judge_status"], pending["final"]) == ("skipped", False) and pending["success"]
    assert not pending["incomplete"] and pending["passed"]
    assert stored(w, "r1") == pending  # readable at once where agents look verdicts up
    assert w.channel("reflections").sent == [] and w.channel("alerts").sent == []
    await judge_all(w)
    first, final = w.channel("evaluations").values()
    assert first == pending
    assert final["evaluation_id"] == pending["evaluation_id"]
    assert final["judge_status"] == "ok" and final["final"]
    assert final["incomplete"] and not final["passed"]
    assert stored(w, "r1") == final
    # what `tracejudge show` and `tracejudge tail` print of each
    assert "judge pending" in show_render(pending, []) and "judge ok" in show_render(final, [])
    assert "judge=pending" in tail_render(names.EVALUATIONS, json.dumps(pending).encode(), {})
    assert "judge=ok" in tail_render(names.EVALUATIONS, json.dumps(final).encode(), {})
    # the actions are the final verdict's, each once
    (reflection,) = w.channel("reflections").values()
    assert reflection["evaluation_id"] == final["evaluation_id"]
    assert [a["kind"] for a in w.channel("alerts").values()] == ["low_score"]
    counts = w.ctx.metrics.counts
    assert (counts["evaluations"], counts["evaluations_pending"]) == (1, 1)
    exposition = w.ctx.metrics.exposition().decode()
    assert "tracejudge_evaluations_pending_total 1.0" in exposition
    # one time to a first verdict per request: the pending one's
    assert "tracejudge_verdict_latency_seconds_count 0.0" in exposition  # no terminal_at here


async def test_a_job_older_than_its_bound_is_not_sent_and_its_rules_verdict_becomes_final(
    fake: FakeLLM,
) -> None:
    w = memory_worker(
        llm_judge_enabled=True,
        llm_base_url=fake.base_url,
        llm_sample_rate=1.0,
        llm_job_max_age_s=60,
        llm_alert_min_requests=1,
    )
    for event in run("r1"):
        await w.event(event)
    (pending,) = w.channel("evaluations").values()
    w.clock.now += 61  # the judge's queue held it longer than the bound
    await judge_all(w)
    assert fake.count() == 0  # never sent: a verdict this late helps nobody
    _, final = w.channel("evaluations").values()
    assert final["evaluation_id"] == pending["evaluation_id"]
    assert final["judge_status"] == "skipped"
    assert final["reasons"][-1] == (
        "not judged: waited 61s in the judge queue (TRACEJUDGE_LLM_JOB_MAX_AGE_S 60s)"
    )
    assert (final["overall_score"], final["success"]) == (pending["overall_score"], True)
    assert "tracejudge_judge_expired_total 1.0" in w.ctx.metrics.exposition().decode()
    # a backlog is not the model down: no judge_unavailable alert for a job never sent
    assert w.channel("alerts").sent == []


def test_the_explorer_keeps_the_judges_verdict_when_the_pending_one_comes_again() -> None:
    store = VerdictStore(capacity=10)
    base = {"request_id": "r1", "evaluation_id": "e1", "overall_score": 80, "ts": 1.0}
    pending = {**base, "judge_status": "skipped", "final": False}
    store.add_evaluation(pending)
    store.add_evaluation({**base, "judge_status": "ok", "overall_score": 20, "ts": 2.0})
    store.add_evaluation(pending)  # delivered again
    found = store.get("r1")
    assert found is not None and (found.judge_status, found.score) == ("ok", 20)
    # a new evaluation of the request (another evaluator version) still replaces it
    store.add_evaluation({**pending, "evaluation_id": "e2", "ts": 3.0})
    found = store.get("r1")
    assert found is not None and found.judge_status == "pending"
