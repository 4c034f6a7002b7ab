"""Early stop on long loops: a `<Conclusion>` in round 2 of 5 after many earlier
steps gets its decision whatever the window keeps of those steps: beyond the step limit, and
with trace capture off, the round's signals are kept, not its text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tracejudge.settings import Settings
from tracejudge.streams.replay.engine import replay


def loop(rid: str, earlier_steps: int) -> list[dict[str, Any]]:
    round1 = "<Hypothesis>the loader drops rows</Hypothesis><Experiment>run tests</Experiment>"
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": rid, "goal": "find the bug", "step_index": 0},
        {
            "type": "iteration",
            "request_id": rid,
            "step_index": 1,
            "iteration": 1,
            "max_iterations": 5,
            "response": round1,
            "observation": "2 tests failed",
            "exec_success": False,
        },
    ]
    for i in range(earlier_steps):
        events.append(
            {
                "type": "tool_call",
                "request_id": rid,
                "step_index": 2 + i,
                "tool": "run_query",
                "args_summary": f"query {i}",
                "success": True,
                "result_preview": f"{i} rows",
            }
        )
    events.append(
        {
            "type": "iteration",
            "request_id": rid,
            "step_index": 2 + earlier_steps,
            "iteration": 2,
            "max_iterations": 5,
            "response": "<Conclusion>The loader drops rows with an empty id.</Conclusion>",
            "observation": "",
        }
    )
    events.append(
        {
            "type": "final_response",
            "request_id": rid,
            "step_index": 3 + earlier_steps,
            "output": "The loader drops rows whose id is empty; fixed by keeping them.",
        }
    )
    return events


@pytest.mark.parametrize("capture", [True, False], ids=["captured", "capture-off"])
@pytest.mark.parametrize("earlier_steps", [50, 200, 1000])
async def test_a_conclusion_after_many_steps_still_stops_the_loop(
    earlier_steps: int, capture: bool
) -> None:
    rid = f"loop-{earlier_steps}-{capture}"
    events = loop(rid, earlier_steps)
    result = await replay(
        Settings(redis_url="", trace_capture=capture),
        [(rid.encode(), json.dumps(e).encode()) for e in events],
    )
    (decision,) = result.early_stops
    assert (decision["iteration"], decision["action"], decision["reason"]) == (
        2,
        "stop",
        "conclusion",
    )
    assert "empty id" in decision["evidence"]
    evaluation = result.evaluations[rid]
    assert evaluation["iterations_used"] == 2 and evaluation["max_iterations"] == 5
    assert evaluation["stopped_early"] is True
    assert evaluation["step_count"] == earlier_steps + 2  # tool calls and the two rounds


async def test_without_max_iterations_the_loop_length_setting_applies() -> None:
    rid = "loop-no-max"
    events = loop(rid, 3)
    for event in events:
        event.pop("max_iterations", None)
    result = await replay(
        Settings(redis_url="", max_iterations=7),
        [(rid.encode(), json.dumps(e).encode()) for e in events],
    )
    assert result.evaluations[rid]["max_iterations"] == 7
    # round 2 of a 2-round loop is its last: the loop ends anyway, nothing to decide
    short = await replay(
        Settings(redis_url="", max_iterations=2),
        [(rid.encode(), json.dumps(e).encode()) for e in events],
    )
    assert short.early_stops == [] and short.evaluations[rid]["max_iterations"] == 2
