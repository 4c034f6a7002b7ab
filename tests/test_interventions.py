"""Interventions while a run runs (issue 42), through the worker's handlers in memory: a loop
or a budget crossed is told on the control topic on the event that crosses it, once per kind,
before the request ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.memory import memory_worker
from tracejudge.judges.budgets import BudgetsError

RID = "run-1"


def start() -> dict[str, Any]:
    return {
        "type": "task_started",
        "request_id": RID,
        "goal": "fix the build",
        "step_index": 0,
        "agent_name": "coder",
    }


def call(i: int, result: str, ok: bool = True, args: str = "mvn test") -> dict[str, Any]:
    return {
        "type": "tool_call",
        "request_id": RID,
        "step_index": i,
        "tool": "bash",
        "args_summary": args,
        "success": ok,
        "result_preview": result,
        "error": None if ok else result,
        "agent_name": "coder",
    }


def thought(i: int, cost: float) -> dict[str, Any]:
    return {
        "type": "reasoning_step",
        "request_id": RID,
        "step_index": i,
        "phase": "plan",
        "intent_summary": "think",
        "usage": {"model": "m", "input_tokens": 1000, "output_tokens": 100, "cost_usd": cost},
        "agent_name": "coder",
    }


async def test_a_loop_is_told_on_the_call_that_completes_it_and_once() -> None:
    w = memory_worker()
    await w.event(start())
    for i in range(1, 3):
        await w.event(call(i, "BUILD FAILURE", ok=False))
    assert w.channel("control").values() == []
    await w.event(call(3, "BUILD FAILURE", ok=False))
    told = w.channel("control").values()
    assert {(t["kind"], t["crossed"], t["step_index"]) for t in told} == {
        ("loop", "repeated_call", 3),
        ("loop", "repeated_failure", 3),
    }
    assert all(t["type"] == "intervention" and t["action"] == "stop" for t in told)
    await w.event(call(4, "BUILD FAILURE", ok=False))
    await w.event(call(4, "BUILD FAILURE", ok=False))  # a duplicate counts nothing
    assert len(w.channel("control").values()) == 2  # each kind once per request


async def test_progress_is_never_told() -> None:
    w = memory_worker()
    await w.event(start())
    for i in range(1, 60):
        await w.event(call(i, f"lines {i * 50}-{i * 50 + 49}", args="scroll_down"))
    assert w.channel("control").values() == []


async def test_a_budget_from_the_file_is_told_when_crossed(tmp_path: Path) -> None:
    budgets = tmp_path / "budgets.toml"
    budgets.write_text('[default]\nsteps = 100\n\n[agents."cod*"]\ncost_usd = 0.05\n')
    w = memory_worker(budgets_file=str(budgets))
    await w.event(start())
    for i in range(1, 5):
        await w.event(thought(i, 0.02))
    (told,) = w.channel("control").values()
    assert (told["kind"], told["crossed"], told["allowed"], told["step_index"]) == (
        "budget",
        "cost_usd",
        0.05,
        3,
    )
    assert told["used"] == pytest.approx(0.06)


def test_a_bad_budgets_file_stops_the_start(tmp_path: Path) -> None:
    budgets = tmp_path / "budgets.toml"
    budgets.write_text("[default]\nsteps = 0\n")
    with pytest.raises(BudgetsError, match="steps = 0: a positive number"):
        memory_worker(budgets_file=str(budgets))


async def test_off_means_nothing_told() -> None:
    w = memory_worker(interventions_enabled=False)
    await w.event(start())
    for i in range(1, 6):
        await w.event(call(i, "same"))
    assert w.channel("control").values() == []
