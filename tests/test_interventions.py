"""Interventions while a run runs, through the worker's handlers in memory: a loop
or a budget crossed is told on the control topic on the event that crosses it, once per kind,
before the request ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.memory import memory_worker
from tracejudge.judges.inflight.savings import estimated_saving
from tracejudge.judges.rules.agent_norms import Norm, Norms, RunStats
from tracejudge.models.outputs import InterventionMade, Saving, Usage
from tracejudge.settings import SettingsError, load_settings

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


async def test_a_loop_is_steered_on_the_call_that_completes_it_never_stopped_cold() -> None:
    w = memory_worker()
    await w.event(start())
    for i in range(1, 3):
        await w.event(call(i, "BUILD FAILURE", ok=False))
    assert w.channel("control").values() == []
    await w.event(call(3, "BUILD FAILURE", ok=False))
    (told,) = w.channel("control").values()  # two rules found it: one intervention
    assert (told["kind"], told["crossed"], told["step_index"]) == ("loop", "repeated_failure", 3)
    assert told["type"] == "intervention" and told["action"] == "steer"
    assert "no normal learned for this agent yet" in told["normal"]
    for i in range(4, 30):  # the run goes on looping: an agent with no normal is only steered
        await w.event(call(i, "BUILD FAILURE", ok=False))
    await w.event(call(29, "BUILD FAILURE", ok=False))  # a duplicate counts nothing
    sent = w.channel("control").values()
    assert [t["action"] for t in sent] == ["steer", "steer"]  # told twice at most per rule
    assert len({t["intervention_id"] for t in sent}) == 2


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


def test_a_bad_budgets_file_or_threshold_stops_every_command_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgets = tmp_path / "budgets.toml"
    budgets.write_text("[default]\nsteps = 0\n")
    monkeypatch.setenv("TRACEJUDGE_BUDGETS_FILE", str(budgets))
    with pytest.raises(SettingsError, match=r"budgets.toml \[default\]: steps = 0: a positive"):
        load_settings()  # before anything connects, as every command reads its settings
    monkeypatch.setenv("TRACEJUDGE_BUDGETS_FILE", str(tmp_path / "missing.toml"))
    with pytest.raises(SettingsError, match=r"missing\.toml: No such file"):
        load_settings()
    monkeypatch.delenv("TRACEJUDGE_BUDGETS_FILE")
    monkeypatch.setenv("TRACEJUDGE_LOOP_REPEAT", "1")
    with pytest.raises(SettingsError, match="loop rule repeat=1: 0 \\(off\\), or from 2"):
        load_settings()


async def test_off_means_nothing_told() -> None:
    w = memory_worker(interventions_enabled=False)
    await w.event(start())
    for i in range(1, 6):
        await w.event(call(i, "same"))
    assert w.channel("control").values() == []


def final(i: int, stopped_by: str | None = None) -> dict[str, Any]:
    return {
        "type": "final_response",
        "request_id": RID,
        "step_index": i,
        "output": "stopped: the build keeps failing",
        "stopped_by": stopped_by,
        "agent_name": "coder",
    }


async def test_the_evaluation_lists_the_intervention_and_whether_the_run_stopped() -> None:
    w = memory_worker()
    await w.event(start())
    for i in range(1, 4):
        await w.event(call(i, "BUILD FAILURE", ok=False))
    (told,) = w.channel("control").values()
    await w.event(call(4, "BUILD FAILURE", ok=False))  # in flight when it was told
    await w.event(final(5, stopped_by=told["intervention_id"]))
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["interventions"] == [
        {
            "intervention_id": told["intervention_id"],
            "kind": "loop",
            "crossed": "repeated_failure",
            "action": "steer",
            "at_step": 3,
            "steps_after": 1,
            "stopped_after": True,
            "read": None,  # the final response did not say (no client reported it)
        }
    ]


async def test_a_run_that_goes_on_after_it_is_told_did_not_stop() -> None:
    w = memory_worker()
    await w.event(start())
    for i in range(1, 9):
        await w.event(call(i, "same"))
    await w.event(final(9))
    (evaluation,) = w.channel("evaluations").values()
    made, again = evaluation["interventions"]  # steered, and again once the loop formed again
    assert (made["crossed"], made["at_step"], made["steps_after"], made["stopped_after"]) == (
        "repeated_call",
        3,
        5,
        False,
    )
    assert (again["action"], again["at_step"]) == ("steer", 6)
    assert again["intervention_id"] != made["intervention_id"]


async def test_a_new_owner_after_a_rebalance_does_not_tell_a_run_again() -> None:
    first = memory_worker()
    await first.event(start())
    for i in range(1, 4):
        await first.event(call(i, "same"))
    assert len(first.channel("control").values()) == 1
    # the partition moves: the next owner reads the window from the same tables
    second = memory_worker(tables=first.tables)
    await second.event(call(3, "same"))  # read again after the move: not a crossing again
    assert second.channel("control").values() == []
    for i in range(4, 10):
        await second.event(call(i, "same"))
    await second.event(final(10))
    # the loop formed again after the steer: the second steer, never the first one again
    (again,) = second.channel("control").values()
    assert again["intervention_id"] != first.channel("control").values()[0]["intervention_id"]
    (evaluation,) = second.channel("evaluations").values()
    assert [m["at_step"] for m in evaluation["interventions"]] == [3, 6]


async def test_a_step_budget_counts_steps_beyond_the_step_limit_exactly(tmp_path: Path) -> None:
    budgets = tmp_path / "budgets.toml"
    budgets.write_text("[default]\nsteps = 12\n")
    w = memory_worker(budgets_file=str(budgets), max_trace_steps=5)
    await w.event(start())
    for i in range(1, 21):
        await w.event(call(i, f"page {i}", args=f"read {i}"))
    (told,) = w.channel("control").values()  # the 13th step, 8 past the steps kept
    assert (told["crossed"], told["allowed"], told["used"], told["step_index"]) == (
        "steps",
        12,
        13,
        13,
    )


async def test_interventions_are_counted_per_agent_kind_and_whether_the_run_stopped() -> None:
    w = memory_worker()
    await w.event(start())
    for i in range(1, 4):
        await w.event(call(i, "BUILD FAILURE", ok=False))
    (told,) = w.channel("control").values()
    await w.event(final(4, stopped_by=told["intervention_id"]))
    value = w.ctx.metrics.registry.get_sample_value
    assert value("tracejudge_interventions_total", {"kind": "loop", "crossed": "repeated_failure"})
    labels = {"agent": "coder", "kind": "loop", "stopped": "true"}
    assert value("tracejudge_agent_interventions_total", labels) == 1.0


def test_what_a_stopped_run_saved_is_its_agents_median_run_beyond_it() -> None:
    made = [
        InterventionMade(
            intervention_id="i",
            kind="loop",
            crossed="repeated_call",
            action="stop",
            at_step=6,
            steps_after=0,
            stopped_after=True,
        )
    ]
    usage = Usage(model_calls=6, input_tokens=5000, output_tokens=1000, cost_usd=0.3)
    stats = RunStats(tool_calls=6, usage=usage)
    norms = Norms("coder", runs=50, min_runs=20, measures={"tool_calls": Norm(30, 40, 60, 80)})
    saved = estimated_saving(made, stats, norms)
    assert saved == Saving(tool_calls=24, tokens=24_000, cost_usd=1.2)
    # a run that went on, or an agent whose normal is not known yet: nothing claimed
    went_on = [made[0].model_copy(update={"stopped_after": False, "steps_after": 9})]
    assert estimated_saving(went_on, stats, norms) is None
    young = Norms("coder", runs=5, min_runs=20, measures=norms.measures)
    assert estimated_saving(made, stats, young) is None
    # a run already longer than the median: a floor of nothing
    long_run = RunStats(tool_calls=45, usage=usage)
    assert estimated_saving(made, long_run, norms) == Saving(tool_calls=0, tokens=0, cost_usd=0.0)


async def test_a_polling_agent_can_turn_the_repeat_rule_off_for_itself(tmp_path: Path) -> None:
    budgets = tmp_path / "budgets.toml"
    budgets.write_text('[agents."coder"]\nloop_repeat = 0\nloop_no_new_result = 0\n')
    w = memory_worker(budgets_file=str(budgets))
    await w.event(start())
    for i in range(1, 12):
        await w.event(call(i, "job 7: running", args="status 7"))
    assert w.channel("control").values() == []
    other = memory_worker()
    await other.event(start())
    for i in range(1, 12):
        await other.event(call(i, "job 7: running", args="status 7"))
    assert [t["crossed"] for t in other.channel("control").values()] == ["repeated_call"] * 2


async def test_a_run_its_budget_stopped_is_not_asked_to_go_on(tmp_path: Path) -> None:
    budgets = tmp_path / "budgets.toml"
    budgets.write_text("[default]\nsteps = 3\n")
    w = memory_worker(budgets_file=str(budgets))
    await w.event({**start(), "planned_steps": ["build", "test", "release"]})
    for i in range(1, 5):
        await w.event(call(i, f"page {i}", args=f"read {i}"))
    (told,) = w.channel("control").values()
    await w.event(final(5, stopped_by=told["intervention_id"]))
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["incomplete"] and evaluation["chain_final"]
    assert "stopped by its steps budget: no reflection asked" in evaluation["reasons"]
    assert w.channel("reflections").values() == []
    # the same run stopped by a loop is asked to go on, afresh
    loop = memory_worker()
    await loop.event({**start(), "planned_steps": ["build", "test", "release"]})
    for i in range(1, 4):
        await loop.event(call(i, "same"))
    (told,) = loop.channel("control").values()
    await loop.event(final(4, stopped_by=told["intervention_id"]))
    assert len(loop.channel("reflections").values()) == 1


def other_run(rid: str, calls: int) -> list[dict[str, Any]]:
    """A run of the same agent with `calls` distinct calls: what its normal is learned from."""
    events = [{**start(), "request_id": rid}]
    events += [
        {**call(i, f"out {i}", args=f"step {i}"), "request_id": rid} for i in range(1, calls + 1)
    ]
    return [*events, {**final(calls + 1), "request_id": rid, "output": "done: all steps ran"}]


async def learned(calls: int, **settings: Any) -> Any:
    """A worker whose agent has a normal: five runs of `calls` calls each."""
    w = memory_worker(baseline_min_runs=5, **settings)
    for n in range(5):
        for event in other_run(f"past-{n}", calls):
            await w.event(event)
    return w


async def test_a_loop_after_its_steer_is_stopped_once_the_run_is_longer_than_its_agents_runs() -> (
    None
):
    w = await learned(3)  # this agent's runs make 3 calls
    await w.event(start())
    for i in range(1, 7):
        await w.event(call(i, "same"))
    steer, stop = w.channel("control").values()
    assert (steer["action"], steer["step_index"], stop["action"], stop["step_index"]) == (
        "steer",
        3,
        "stop",
        6,
    )
    assert "up to 3 tool calls" in stop["normal"] and "this run has made 6" in stop["normal"]
    for i in range(7, 12):
        await w.event(call(i, "same"))
    assert len(w.channel("control").values()) == 2  # one stop per run


async def test_a_loop_within_its_agents_normal_length_is_steered_not_stopped() -> None:
    w = await learned(40)  # long runs are this agent's normal
    await w.event(start())
    for i in range(1, 30):
        await w.event(call(i, "same"))
    assert [t["action"] for t in w.channel("control").values()] == ["steer", "steer"]


async def test_the_team_chooses_per_agent_and_rule_what_a_loop_does(tmp_path: Path) -> None:
    budgets = tmp_path / "budgets.toml"
    budgets.write_text(
        '[default]\nloop_action = "steer"\n\n[agents."coder"]\n'
        'loop_actions = {repeated_failure = "stop"}\n'
    )
    w = await learned(3, budgets_file=str(budgets))
    await w.event(start())
    for i in range(1, 10):
        await w.event(call(i, "same"))  # repeated_call: steer only, whatever the length
    assert [t["action"] for t in w.channel("control").values()] == ["steer", "steer"]
    for i in range(10, 13):
        await w.event(call(i, "FAIL", ok=False, args="deploy"))
    assert w.channel("control").values()[-1]["action"] == "stop"  # stopped at once
    bad = tmp_path / "bad.toml"
    bad.write_text('[default]\nloop_actions = {repeated_cal = "stop"}\n')
    with pytest.raises(ValueError, match=r"unknown rule.*repeated_cal"):
        memory_worker(budgets_file=str(bad))
