"""The reflection worker's callback as docs/reflections.md shows it, run on the refund that
failed: its reflection request names `refund` and its error, and the follow-up the documented
callback records is complete and successful on the first round."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.test_rules import window_of
from tracejudge.client.events import Recorder
from tracejudge.client.reflections import Reflection, _reflection, follow_up_request_id
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.verdict.conclude import (
    DISABLED,
    Policy,
    WindowFacts,
    conclude,
    evaluator_version,
)
from tracejudge.models.outputs import ReflectionRequest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reflections.md"
judge = RuleJudge()


def documented_callback(do: Any) -> Any:
    """`finish` as the page shows it, with `do` (the agent's own work) given."""
    block = re.search(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    assert block is not None
    source = block.group(1).split("\nReflectionWorker(")[0]  # not the line that connects
    space: dict[str, Any] = {"do": do}
    exec(compile(source, str(DOCS), "exec"), space)
    return space["finish"]


def verdict_of(events: list[dict[str, Any]]) -> Any:
    window = window_of(events)
    return conclude(
        WindowFacts.of(window),
        judge.judge(window),
        DISABLED,
        Policy(),
        evaluator_version(judge.version),
        0.0,
    )


def test_the_documented_callback_finishes_a_failed_refund_on_the_first_follow_up() -> None:
    origin: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": "o1", "goal": "refund order 7"},
        {"type": "tool_call", "request_id": "o1", "step_index": 1, "tool": "get_order",
         "args_summary": '{"order_id": 7}', "success": True},
        {"type": "tool_call", "request_id": "o1", "step_index": 2, "tool": "refund",
         "args_summary": '{"order_id": 7}', "success": False, "error": "payment gateway timeout"},
        {"type": "final_response", "request_id": "o1", "output": "I could not refund the order."},
    ]  # fmt: skip
    verdict = verdict_of(origin)
    request = verdict.reflection
    assert isinstance(request, ReflectionRequest)
    [left] = request.remaining
    assert left.step == "refund" and left.error == "payment gateway timeout"
    assert (
        "refund" in request.remaining_steps[0]
        and "payment gateway timeout" in request.remaining_steps[0]
    )

    done: list[tuple[str, str | None]] = []

    def do(step: str, args: str | None) -> bool:  # the agent's own work: it succeeds now
        done.append((step, args))
        return True

    finish = documented_callback(do)
    events: list[dict[str, Any]] = []

    def emit(event: dict[str, Any]) -> bool:
        events.append(event)
        return True

    reflection: Reflection = _reflection(request, follow_up_request_id(request.reflection_id), 1)
    run = Recorder(
        emit,
        request.goal,
        request_id=reflection.request_id,
        planned_steps=[r.step for r in reflection.remaining],  # as the worker declares them
        parent_request_id=request.request_id,
        reflection_round=request.reflection_round,
    )
    run.final(finish(reflection, run))
    assert done == [("refund", '{"order_id": 7}')]
    follow_up = verdict_of(events).evaluation
    assert follow_up.success and not follow_up.incomplete and follow_up.remaining == []
