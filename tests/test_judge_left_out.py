"""What the judge's prompt left out reaches the evaluation's provenance: the
counts its own `left_out` told the judge (steps omitted, failed steps shortened, merged or
listed compactly, texts clipped) travel in the judge job to `JudgeCall.input_left_out`, and
`tracejudge show` and the explorer's request page say them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fake_llm import FakeLLM
from tests.memory import memory_worker
from tests.test_judge_input import distinct_failures
from tests.test_judge_usage import answered, judge_pending
from tracejudge.models.outputs import JudgeCall
from tracejudge.streams.explorer.show import judge_call, render


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


async def test_failures_listed_compactly_reach_the_evaluation_and_show(fake: FakeLLM) -> None:
    fake.script = lambda body, n: answered({"prompt_tokens": 900, "completion_tokens": 10})
    w = memory_worker(llm_judge_enabled=True, llm_base_url=fake.base_url, llm_max_input_chars=6000)
    try:
        for event in distinct_failures(60):  # beyond the step limit, failures kept as digests
            await w.event(event)
        (job,) = w.channel("judge_requests").values()
        await judge_pending(w)
    finally:
        if w.ctx.judge_jobs is not None:
            await w.ctx.judge_jobs.aclose()
    left_out = job["left_out"]
    assert left_out["failed_steps_listed_compactly"] > 0
    assert (
        sum(v for k, v in left_out.items() if k in ("tool_call", "failed_step"))
        == job["steps_omitted"]
    )
    evaluations = [e for e in w.channel("evaluations").values() if e.get("judge")]
    (evaluation,) = evaluations
    assert evaluation["judge_status"] == "ok"
    assert evaluation["judge"]["input_left_out"] == left_out
    n = left_out["failed_steps_listed_compactly"]
    shown = render(evaluation, [])
    assert f"failed steps {n} listed only as index, tool and error head" in shown


def test_show_says_each_kind_of_cut_and_an_older_record_shows_none() -> None:
    call = JudgeCall(
        requested_model="m",
        prompt_version="p",
        cached=False,
        attempts=1,
        steps_omitted=7,
        input_left_out={
            "tool_call": 7,
            "planned_steps": 40,
            "failed_steps_shortened_to_digests": 3,
            "failed_steps_merged_into_repeats": 12,
            "goal_clipped": 1,
        },
    ).model_dump(mode="json")
    assert judge_call(call)[1] == (
        "7 steps left out of the prompt; failed steps 3 shortened to a digest, 12 merged into "
        "entries of repeats; 40 planned steps left out; goal clipped"
    )
    older = {k: v for k, v in call.items() if k != "input_left_out"}
    assert judge_call(older)[1] == "7 steps left out of the prompt"


def test_the_left_out_counts_are_bounded_names_not_text() -> None:
    with pytest.raises(ValueError):
        JudgeCall(
            requested_model="m",
            prompt_version="p",
            cached=False,
            attempts=1,
            input_left_out={"sk-live secret in a key": 1},
        )
