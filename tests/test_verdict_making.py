"""Making a closed window's verdict (pure), and the verdict log line."""

from __future__ import annotations

import json
import logging
import re

import pytest

from tracejudge.judges.verdict.conclude import Policy
from tracejudge.judges.verdict.encoded import Summary
from tracejudge.judges.verdict.make import Closing, Judging, LLMRouting, make_verdict
from tracejudge.judges.windows.records import step_record
from tracejudge.models.events import parse_event
from tracejudge.streams.demo.samples import sample_traces
from tracejudge.streams.shared.verdict_log import VerdictLog

JUDGING = Judging(tool_call_budget=12, policy=Policy(), version="test", llm=None)


def closings() -> list[Closing]:
    out = []
    for trace in sample_traces("vp"):
        records = [step_record(parse_event(e), beyond_limit=False) for e in trace.events]
        out.append(
            Closing(trace.request_id, "final_response", records, len(records), 0, [], 1e9, None)
        )
    return out


def test_a_verdict_is_made_the_same_every_time() -> None:
    first, second = ([make_verdict(JUDGING, c) for c in closings()] for _ in range(2))
    assert first == second
    assert all(m.evaluation is not None and m.job is None for m in first)
    assert any(m.reflection is not None for m in first) and any(m.alerts for m in first)


def test_a_sampled_request_gets_a_judge_job_and_its_rules_verdict_as_pending() -> None:
    judging = Judging(12, Policy(), "test", LLMRouting(sample_rate=1.0, max_input_chars=4000))
    for closing in closings():
        made = make_verdict(judging, closing)
        rules_only = make_verdict(JUDGING, closing)
        assert made.job is not None and made.evaluation is not None and made.summary is not None
        pending = json.loads(made.evaluation)
        final = json.loads(rules_only.evaluation or b"")
        assert pending["final"] is False and made.summary.pending
        # the rules' verdict itself, under the id the judge's verdict will carry
        for field in ("overall_score", "success", "incomplete", "passed", "evaluation_id"):
            assert pending[field] == final[field], field
        assert made.reflection is None and made.alerts == []  # they follow the final verdict


def test_a_window_whose_records_cannot_be_read_raises() -> None:
    broken = Closing("bad", "final_response", [b"{not json"], 1, 0, [], 1e9, None)
    with pytest.raises(Exception):  # noqa: B017 - the error policy dead-letters whatever it is
        make_verdict(JUDGING, broken)


def summary(rid: str, success: bool = True) -> Summary:
    return Summary(rid, "skipped", 80, success, not success, "final_response", ("a",), False)


def test_the_verdict_log_writes_counts_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    verdicts = VerdictLog(interval_s=10, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="tracejudge.streams.shared.outputs")
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
