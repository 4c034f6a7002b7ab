"""Which closed requests the LLM judge reads: every flagged one, a deterministic share of the
rest, per agent or agent version when the settings say so; the others say why not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from tests.memory import memory_worker
from tracejudge.judges.llm.sampling import RateRule, Selection, parse_rates
from tracejudge.settings import Settings, SettingsError, load_settings
from tracejudge.streams.explorer.show import render

IDS = [f"req-{i:05d}" for i in range(4000)]  # fixed: the counts below are exact, not flaky


def chosen(selection: Selection, agent: str | None = None, version: str | None = None) -> set[str]:
    return {rid for rid in IDS if selection.why_not(rid, agent, version, flagged=False) is None}


def test_a_flagged_request_is_judged_whatever_its_rate() -> None:
    nothing_sampled = Selection(rate=0.0, rates=parse_rates("planner=0"))
    for rid in IDS[:200]:
        assert nothing_sampled.why_not(rid, "planner", "1.0", flagged=True) is None
        assert nothing_sampled.why_not(rid, "planner", "1.0", flagged=False) is not None
    # with flagged judging off they are sampled like the rest, and say so
    off = Selection(rate=0.0, flagged=False)
    reason = off.why_not(IDS[0], "planner", None, flagged=True)
    assert reason is not None and "flagged ones are sampled too" in reason


def test_the_rate_of_the_rest_selects_about_that_share_and_grows_by_adding() -> None:
    five, ten = chosen(Selection(rate=0.05)), chosen(Selection(rate=0.10))
    # binomial(4000, p): 4 standard deviations either side
    assert 200 - 4 * 13.8 < len(five) < 200 + 4 * 13.8
    assert 400 - 4 * 19.0 < len(ten) < 400 + 4 * 19.0
    assert five < ten  # one hash: raising a rate only adds requests
    assert chosen(Selection(rate=0.0)) == set() and chosen(Selection(rate=1.0)) == set(IDS)


def test_an_agent_rate_overrides_the_default_and_the_reason_names_it() -> None:
    selection = Selection(rate=0.0, rates=parse_rates("planner=1, research-*=0.25"))
    assert chosen(selection, "planner") == set(IDS)
    assert 1000 - 4 * 27.4 < len(chosen(selection, "research-web")) < 1000 + 4 * 27.4
    assert chosen(selection, "billing") == set() and chosen(selection, None) == set()
    rid = next(r for r in IDS if r not in chosen(selection, "research-web"))
    assert selection.why_not(rid, "research-web", None, flagged=False) == (
        "LLM judge: not selected (passed the rules; outside the 25% sample for research-*)"
    )
    assert selection.why_not(rid, "billing", None, flagged=False) == (
        "LLM judge: not selected (passed the rules; sample rate 0)"
    )


@pytest.mark.parametrize("rates", ["planner=0,planner@2.*=1", "planner@2.*=1,planner=0"])
def test_an_agent_version_rate_wins_over_the_agent_rate_in_any_order(rates: str) -> None:
    selection = Selection(rate=0.5, rates=parse_rates(rates))
    assert chosen(selection, "planner", "2.1") == set(IDS)
    assert chosen(selection, "planner", "1.9") == set()
    assert chosen(selection, "planner", None) == set()  # no version given: the agent's entry
    reason = selection.why_not(IDS[0], "planner", "1.9", flagged=False)
    assert reason == "LLM judge: not selected (passed the rules; sample rate 0 for planner)"


def test_the_same_requests_are_selected_in_another_process() -> None:
    # a re-run, a replay or another worker decides alone: the hash must not be Python's
    # per-process salted hash()
    selection = Selection(rate=0.3, rates=parse_rates("planner@2=0.6"))
    here = sorted(chosen(selection, "planner", "2")) + sorted(chosen(selection, "other"))
    code = (
        "import json, sys\n"
        "from tracejudge.judges.llm.sampling import Selection, parse_rates\n"
        "s = Selection(rate=0.3, rates=parse_rates('planner@2=0.6'))\n"
        "ids = json.loads(sys.stdin.read())\n"
        "pick = lambda a, v: sorted(r for r in ids if s.why_not(r, a, v, False) is None)\n"
        "print(json.dumps(pick('planner', '2') + pick('other', None)))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(IDS),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout) == here


# --- settings -------------------------------------------------------------------------------


def test_rates_parse_with_spaces_and_a_trailing_comma() -> None:
    assert parse_rates(" planner = 0.5, planner@2.* =1 ,") == (
        RateRule("planner", None, 0.5),
        RateRule("planner", "2.*", 1.0),
    )
    assert parse_rates("") == ()


@pytest.mark.parametrize(
    ("given", "bad", "says"),
    [
        ("planner=0.5,research", "research", "expected agent=rate"),
        ("planner=2", "planner=2", "from 0 to 1"),
        ("planner=half", "planner=half", "from 0 to 1"),
        ("planner=nan", "planner=nan", "from 0 to 1"),
        ("=0.5", "=0.5", "expected agent=rate"),
        ("planner@=0.5", "planner@=0.5", "expected agent=rate"),
        ("planner=0.5,planner=1", "planner=1", "given twice"),
    ],
)
def test_a_bad_rate_entry_stops_the_start_naming_the_entry(
    monkeypatch: pytest.MonkeyPatch, given: str, bad: str, says: str
) -> None:
    monkeypatch.setenv("TRACEJUDGE_LLM_SAMPLE_RATES", given)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    [line] = caught.value.problems
    assert line.startswith("TRACEJUDGE_LLM_SAMPLE_RATES=")
    assert f"entry {bad!r}" in line and says in line


def test_flagged_requests_are_judged_by_default_and_the_setting_turns_it_off() -> None:
    assert Settings(llm_judge_enabled=True).llm_judge_flagged is True
    assert Settings(llm_judge_flagged=False).llm_judge_flagged is False
    with pytest.raises(ValidationError):
        Settings(llm_sample_rates="planner")


# --- through the worker ---------------------------------------------------------------------


def events(rid: str, tool_ok: bool) -> list[dict[str, Any]]:
    who = {"request_id": rid, "agent_name": "planner", "agent_version": "1.4"}
    return [
        {**who, "type": "task_started", "goal": "book a flight", "step_index": 0},
        {**who, "type": "tool_call", "step_index": 1, "tool": "search", "success": tool_ok},
        {**who, "type": "final_response", "step_index": 2, "output": "Booked UA 12, ref X1Y2."},
    ]


async def test_the_worker_judges_a_flagged_request_and_says_why_it_did_not_judge_another() -> None:
    w = memory_worker(
        llm_judge_enabled=True,
        llm_base_url="http://127.0.0.1:9/v1",
        llm_sample_rate=1.0,  # the agent's entry decides, not the default
        llm_sample_rates="planner=0",
    )
    for event in events("bad-run", tool_ok=False) + events("good-run", tool_ok=True):
        await w.event(event)
    (job,) = w.channel("judge_requests").values()
    assert job["facts"]["request_id"] == "bad-run"
    pending, evaluation = w.channel("evaluations").values()
    assert pending["request_id"] == "bad-run" and pending["final"] is False
    assert evaluation["request_id"] == "good-run" and evaluation["judge_status"] == "skipped"
    assert evaluation["passed"] and evaluation["success"] and not evaluation["incomplete"]
    reason = "LLM judge: not selected (passed the rules; sample rate 0 for planner)"
    assert evaluation["reasons"][-1] == reason
    assert f"  - {reason}" in render(evaluation, [])  # what `tracejudge show` prints
