"""The judge process: a real child judging against the scripted model server, concurrently."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from tests.fake_llm import FakeLLM, Reply, tool_call_reply, verdict
from tests.test_llm_judge import _job
from tracejudge.judges.verdicts import JudgeJob
from tracejudge.streams.judging.stage import JudgeStage
from tracejudge.streams.settings import Settings
from tracejudge.streams.worker.child import portable
from tracejudge.streams.worker.errors import on_error
from tracejudge.streams.worker.judge_jobs import InlineJudge
from tracejudge.streams.worker.judge_process import JudgeProcess, JudgeProcessDied


@pytest.fixture
def model() -> Iterator[FakeLLM]:
    def answer(body: dict[str, Any], n: int) -> Reply:
        return tool_call_reply(verdict(True, False, 70), delay_s=0.5)

    with FakeLLM(answer) as fake:
        yield fake


def settings(url: str) -> Settings:
    return Settings.model_validate(
        {
            "llm_judge_enabled": True,
            "llm_base_url": url,
            "llm_api_key": "test",
            "llm_timeout_s": 5.0,
            "llm_max_attempts": 1,
            "llm_concurrency": 8,
            "redis_url": "",
        }
    )


def jobs(n: int) -> list[JudgeJob]:
    base = _job()
    return [
        base.model_copy(update={"facts": base.facts.model_copy(update={"request_id": f"r{i}"})})
        for i in range(n)
    ]


async def test_the_child_judges_like_the_inline_stage_with_calls_in_flight_at_once(
    model: FakeLLM,
) -> None:
    config = settings(model.base_url)
    child = JudgeProcess(config, "test-version")
    inline = InlineJudge(JudgeStage(config, None, config.verdict_policy(), "test-version"))
    try:
        asked = jobs(8)
        started = time.monotonic()
        judged = await asyncio.gather(*(child(j.model_dump_json().encode()) for j in asked))
        took = time.monotonic() - started
        expected = [await inline(j.model_dump_json().encode()) for j in asked[:2]]
    finally:
        await child.aclose()
        await inline.aclose()
    # 8 calls of 0.5 s each: together, not one after another (the child's start included)
    assert took < 8 * 0.5 and model.max_in_flight == 8
    assert [j.made.request_id for j in judged] == [f"r{i}" for i in range(8)]
    assert all(j.outcome.status == "ok" and j.outcome.latency_s for j in judged)
    assert all(j.outcome.answer is None for j in judged)  # it travels encoded, in `made`
    for got, want in zip(judged, expected, strict=False):
        assert got.made.summary == want.made.summary
        assert got.made.alerts == want.made.alerts and got.made.reflection == want.made.reflection


async def test_a_job_that_fails_in_the_child_raises_in_the_caller_and_the_child_goes_on(
    model: FakeLLM,
) -> None:
    child = JudgeProcess(settings(model.base_url), "test-version")
    try:
        with pytest.raises(ValidationError):  # as decoding it here would raise
            await child(b"{not json")
        good = _job()
        assert (await child(good.model_dump_json().encode())).outcome.status == "ok"
    finally:
        await child.aclose()


async def test_a_child_that_dies_fails_every_call_and_the_worker_exits(model: FakeLLM) -> None:
    child = JudgeProcess(settings(model.base_url), "test-version")
    raw = _job().model_dump_json().encode()
    await child.start()
    waiting = asyncio.ensure_future(child(raw))  # in flight when the child dies
    await asyncio.sleep(0.2)
    assert child._process is not None
    os.kill(child._process.pid, signal.SIGKILL)
    with pytest.raises(JudgeProcessDied) as died:
        await asyncio.wait_for(waiting, 10)
    assert on_error(died.value) == "exit"  # redelivered after a restart, not dead-lettered
    with pytest.raises(JudgeProcessDied):  # and every call after, at once
        await asyncio.wait_for(child(raw), 10)
    await child.aclose()


class TwoArgs(Exception):
    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a} {b}")  # args holds one item: rebuilding it fails


def test_an_exception_that_cannot_be_rebuilt_crosses_the_pipe_as_its_text() -> None:
    exc = portable(TwoArgs("bad", "job"))
    assert type(exc) is RuntimeError and "TwoArgs" in str(exc) and "bad job" in str(exc)
    assert type(portable(ValueError("fine"))) is ValueError
