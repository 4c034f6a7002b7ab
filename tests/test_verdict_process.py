"""The verdict process: a real child, fed and read through its pipes on the event loop."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal

import pytest

from tracejudge.judges.verdicts import Policy
from tracejudge.models.events import parse_event
from tracejudge.streams.demo.samples import sample_traces
from tracejudge.streams.worker.records import step_record
from tracejudge.streams.worker.verdict_log import VerdictLog
from tracejudge.streams.worker.verdict_making import (
    Closing,
    Judging,
    LLMRouting,
    Summary,
    make_verdict,
)
from tracejudge.streams.worker.verdict_process import ProcessMaker, VerdictProcessDied

JUDGING = Judging(tool_call_budget=12, policy=Policy(), version="test", llm=None)


def closings() -> list[Closing]:
    out = []
    for trace in sample_traces("vp"):
        records = [step_record(parse_event(e), beyond_limit=False) for e in trace.events]
        out.append(
            Closing(trace.request_id, "final_response", records, len(records), 0, [], 1e9, None)
        )
    return out


async def test_the_child_makes_the_same_verdicts_as_inline_in_the_order_asked() -> None:
    maker = ProcessMaker(JUDGING)
    try:
        asked = closings() * 3
        made = await asyncio.gather(*(maker(c) for c in asked))  # all in flight at once
        assert made == [make_verdict(JUDGING, c) for c in asked]
        assert len({m.request_id for m in made}) == 5
    finally:
        await maker.close()


async def test_a_judge_job_comes_back_for_a_sampled_request() -> None:
    judging = Judging(12, Policy(), "test", LLMRouting(sample_rate=1.0, max_input_chars=4000))
    maker = ProcessMaker(judging)
    try:
        [made] = [await maker(c) for c in closings()[:1]]
        assert made.job is not None and made.evaluation is None
    finally:
        await maker.close()


async def test_a_verdict_that_fails_raises_in_the_caller_and_the_child_goes_on() -> None:
    maker = ProcessMaker(JUDGING)
    try:
        good = closings()[0]
        broken = Closing("bad", "final_response", [b"{not json"], 1, 0, [], 1e9, None)
        with pytest.raises(Exception) as failed:
            await maker(broken)
        assert not isinstance(failed.value, VerdictProcessDied)
        assert (await maker(good)) == make_verdict(JUDGING, good)
    finally:
        await maker.close()


async def test_a_child_that_dies_fails_every_call_waiting_on_it() -> None:
    maker = ProcessMaker(JUDGING)
    await maker.start()
    assert maker._process is not None
    os.kill(maker._process.pid, signal.SIGKILL)
    with pytest.raises(VerdictProcessDied):
        await asyncio.wait_for(maker(closings()[0]), 10)
    with pytest.raises(VerdictProcessDied):  # and every call after, at once
        await asyncio.wait_for(maker(closings()[1]), 10)
    await maker.close()


def summary(rid: str, success: bool = True) -> Summary:
    return Summary(rid, "skipped", 80, success, not success, "final_response", ("a",), False)


def test_the_verdict_log_writes_counts_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    verdicts = VerdictLog(interval_s=10, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="tracejudge.streams.worker.outputs")
    for i in range(100):  # 100 verdicts over 20 s: the first at once, then one line per 10 s
        now[0] = i * 0.2
        verdicts.note(summary(f"r{i}", success=i % 4 != 0))
    verdicts.flush()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("evaluated 1 requests since start")
    assert len(lines) == 3
    assert sum(int(line.split()[1]) for line in lines) == 100
    incomplete = [re.search(r"(\d+) incomplete", line) for line in lines]
    assert sum(int(m[1]) for m in incomplete if m) == 25
    verdicts.flush()  # nothing new: no line
    assert len(caplog.records) == 3
