"""Each agent's normal: a cold start with no relative penalty, then runs judged against their
own agent's history only; counts exact beyond the step limit; the book's table is what a
restart reads."""

from __future__ import annotations

from typing import Any

from tests.memory import memory_worker
from tracejudge.judges.rules.agent_norms import RunStats
from tracejudge.judges.rules.baselines import Baseline
from tracejudge.streams.worker.baselines import BaselineBook


def run(rid: str, agent: str | None, calls: int, failed: int = 0) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": rid, "goal": "find order 7", "ts": 100.0}
    ]
    if agent is not None:
        events[0]["agent_name"] = agent
    for i in range(calls):
        events.append(
            {
                "type": "tool_call",
                "request_id": rid,
                "step_index": i + 1,
                "tool": f"lookup_{i}",
                "args_summary": f"page {i}",
                "success": i >= failed,
                "ts": 100.0 + i,
            }
        )
    events.append(
        {
            "type": "final_response",
            "request_id": rid,
            "step_index": calls + 1,
            "output": "Order 7 shipped on May 2 and arrives on Friday, as the tracking shows.",
            "ts": 100.0 + calls,
        }
    )
    return events


def rules(evaluation: dict[str, Any]) -> list[str]:
    return [f["rule"] for f in evaluation["findings"]]


async def judged(worker: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
    for event in events:
        await worker.event(event)
    evaluation: dict[str, Any] = worker.channels.evaluations.values()[-1]
    assert evaluation["request_id"] == events[0]["request_id"]
    return evaluation


async def test_no_relative_penalty_before_the_minimum_then_a_long_run_is_found() -> None:
    worker = memory_worker(baseline_min_runs=5)
    for i in range(5):
        early = await judged(worker, run(f"early-{i}", "bot", calls=3 if i else 40))
        # the first run is ten times the others: still nothing to compare it with
        assert "long_for_agent" not in rules(early)
        assert any("still being learned (fewer than 5 runs)" in r for r in early["reasons"])
    usual = await judged(worker, run("usual", "bot", calls=3))
    assert rules(usual) == [] and not any("still being learned" in r for r in usual["reasons"])
    long = await judged(worker, run("long", "bot", calls=30))
    assert "long_for_agent" in rules(long)
    assert long["dimension_scores"]["efficiency"] < usual["dimension_scores"]["efficiency"]


async def test_a_run_is_long_only_against_its_own_agent() -> None:
    worker = memory_worker(baseline_min_runs=5)
    for i in range(6):
        await judged(worker, run(f"coder-{i}", "coder", calls=40 + i % 3))
        await judged(worker, run(f"support-{i}", "support", calls=3 + i % 2))
        await judged(worker, run(f"anon-{i}", None, calls=10))
    coder = await judged(worker, run("coder-x", "coder", calls=41))
    support = await judged(worker, run("support-x", "support", calls=41))
    anonymous = await judged(worker, run("anon-x", None, calls=41))  # its own group
    assert "long_for_agent" not in rules(coder)
    assert "long_for_agent" in rules(support)
    assert "long_for_agent" in rules(anonymous)
    assert coder["overall_score"] > support["overall_score"]


async def test_counts_cover_steps_beyond_the_step_limit_which_cost_nothing() -> None:
    worker = memory_worker(max_trace_steps=5, baseline_min_runs=3)
    for i in range(3):
        await judged(worker, run(f"short-{i}", "bot", calls=3, failed=0))
    # 25 calls, 10 of them failed and redone later: most beyond the 5 steps kept
    over = await judged(worker, run("over", "bot", calls=25, failed=10))
    assert over["steps_dropped"] == 20
    assert over["summary"].startswith("25 tool call(s)")
    assert "failures_for_agent" in rules(over) and "long_for_agent" in rules(over)
    assert any("kept as counts only (25 tool calls in all)" in r for r in over["reasons"])
    same = await judged(worker, run("same", "bot", calls=3))
    plain = memory_worker(max_trace_steps=500, baseline_min_runs=3)
    for i in range(3):
        await judged(plain, run(f"short-{i}", "bot", calls=3, failed=0))
    assert (await judged(plain, run("same", "bot", calls=3)))["overall_score"] == same[
        "overall_score"
    ]


def test_the_book_reads_back_what_it_wrote_and_merges_partitions_exactly() -> None:
    table: dict[str, Any] = {}
    book = BaselineBook(table, min_runs=4, epoch_runs=100, write_every_s=1.0)
    for i in range(8):
        book.observe("bot", i % 2, RunStats(tool_calls=3 + i), now=i / 10)
    assert book.due(10.0) == {0, 1}  # learned since written, written over a second ago
    assert book.write(0, 10.0) + book.write(1, 10.0) == 2
    before = book.norms("bot")
    restarted = BaselineBook(table, min_runs=4, epoch_runs=100)  # after a restart
    after = restarted.norms("bot")
    assert after.runs == 8 and after.measures == before.measures
    whole = Baseline(100)
    for i in range(8):
        whole.observe(RunStats(tool_calls=3 + i))
    assert whole.norms("bot", 4).measures == after.measures  # the merge is exact


def test_old_epochs_are_forgotten() -> None:
    baseline = Baseline(epoch_runs=10)
    for _ in range(20):
        baseline.observe(RunStats(tool_calls=50))
    for _ in range(20):
        baseline.observe(RunStats(tool_calls=5))
    norm = baseline.norms("bot", 10).measures["tool_calls"]
    assert norm.p95 < 6  # the 50-call runs are two epochs back


async def test_a_loop_beyond_the_step_limit_is_found_from_the_counts() -> None:
    # no tail kept whole: the calls beyond the limit are known only by the run's counts
    worker = memory_worker(max_trace_steps=3, trace_tail_steps=0)
    events = run("looped", "bot", calls=2)
    final = events.pop()
    for i in range(3, 8):  # the same call five times in a row, all beyond the 3 steps kept
        events.append({**events[-1], "step_index": i, "tool": "poll", "args_summary": "job 7"})
    events.append({**final, "step_index": 9})
    evaluation = await judged(worker, events)
    evidence = dict((f["rule"], f["evidence"]) for f in evaluation["findings"])
    assert evidence["identical_call_loop"] == "poll (5 identical calls in a row)"
