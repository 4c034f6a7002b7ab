"""A team's own dimensions as first-class scores: a metric each, an optional threshold in the
criteria file that raises a `low_dimension` alert (naming the dimension) whether or not the
run passed, a view of its own in agreement against outcomes, and the prompt a team's criteria
make printed without asking a model."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_llm import FakeLLM, tool_call_reply, verdict
from tests.memory import memory_worker
from tests.realservices import ROOT
from tests.test_judge_pending import judge_all, run
from tracejudge.judges.agreement.tally import Kept, Tally, Truth, View, cells, views_of
from tracejudge.judges.llm.criteria import CriteriaBook, CriteriaError
from tracejudge.streams.agreement.report import agreement_json, agreement_lines

CRITERIA = """
[default]
version = "d1"
criteria = "Never promise a delivery date."
[default.dimensions]
policy_compliance = "Does the run follow the delivery policy?"
tone = "Is the tone professional?"
[default.thresholds]
policy_compliance = 70
"""


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


async def test_a_dimension_below_its_threshold_alerts_once_even_on_a_run_that_passed(
    fake: FakeLLM, tmp_path: Path
) -> None:
    path = tmp_path / "criteria.toml"
    path.write_text(CRITERIA)
    fake.script = lambda body, n: tool_call_reply(
        verdict(True, False, 90, policy_compliance=40, tone=95)
    )
    w = memory_worker(
        llm_judge_enabled=True,
        llm_base_url=fake.base_url,
        llm_sample_rate=1.0,
        llm_criteria_file=str(path),
    )
    for event in run("r1"):
        await w.event(event)
    await judge_all(w)
    final = w.channel("evaluations").values()[-1]
    assert final["passed"] and final["dimension_scores"]["criteria"] == {
        "policy_compliance": 40,
        "tone": 95,
    }
    (alert,) = w.channel("alerts").values()
    assert (alert["kind"], alert["dimension"]) == ("low_dimension", "policy_compliance")
    assert alert["message"].startswith("policy_compliance 40 below its threshold 70")
    exposed = w.ctx.metrics.exposition().decode()
    series = 'tracejudge_dimension_score_count{agent="(no agent name)",dimension="tone"} 1.0'
    assert series in exposed
    assert 'tracejudge_alerts_total{kind="low_dimension"} 1.0' in exposed


def test_a_dimension_is_a_view_of_its_own_against_outcomes() -> None:
    tally = Tally()
    for score, ok in [(90, True), (35, True), (30, False), (40, False), (80, False)]:
        kept = Kept(
            "support",
            None,
            60,
            View(70, False, False),
            judge=View(70, False, False),
            blend=View(70, False, False),
            dimensions=(("policy_compliance", score, score < 70),),
        )
        assert Kept.decode(kept.encode()) == kept  # what the store keeps, read back
        tally.add(cells(kept, Truth(ok, "human")))
    assert views_of(tally) == ["dimension:policy_compliance"]
    figures = tally.figures("dimension:policy_compliance", agent="support")
    assert figures.runs == 5 and figures.auc == pytest.approx(4 / 6)
    assert figures.failed_flagged.value == pytest.approx(2 / 3)
    doc = agreement_json(tally)["support"]
    assert doc["dimensions"]["policy_compliance"]["runs"] == 5
    assert any("the team's dimension policy_compliance: AUC 0.667" in line
               for line in agreement_lines({"support": doc}))  # fmt: skip
    # a run that kept no dimension (an older worker's record) reads back as before
    plain = Kept("support", None, 60, View(70, False, False))
    assert Kept.decode(plain.encode()).dimensions == () and "dimension" not in plain.encode()


def test_a_threshold_names_a_dimension_of_its_table(tmp_path: Path) -> None:
    path = tmp_path / "criteria.toml"
    path.write_text(CRITERIA.replace("policy_compliance = 70", "politeness = 70"))
    with pytest.raises(CriteriaError, match="'politeness' is not a dimension of this table"):
        CriteriaBook.read(path)
    path.write_text(CRITERIA.replace("= 70", "= 170"))
    with pytest.raises(CriteriaError, match="must be an integer score 1-100"):
        CriteriaBook.read(path)
    path.write_text(CRITERIA)
    changed = tmp_path / "changed.toml"
    changed.write_text(CRITERIA.replace("= 70", "= 50"))
    # a threshold is for alerts: the judge's prompt, and so its cached answers, stay the same
    a, b = CriteriaBook.read(path).default, CriteriaBook.read(changed).default
    assert a is not None and b is not None and a.digest == b.digest


def test_the_prompt_for_an_agent_prints_without_a_model(tmp_path: Path) -> None:
    path = tmp_path / "criteria.toml"
    path.write_text(CRITERIA)
    env: dict[str, Any] = {
        "PATH": "/usr/bin:/bin",
        "TRACEJUDGE_LLM_CRITERIA_FILE": str(path),
        "TRACEJUDGE_KAFKA_BOOTSTRAP": "127.0.0.1:1",  # never reached
    }
    done = subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", "judge", "--print-prompt",
         "--agent", "support-eu"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "## The operator's criteria for this agent" in out
    assert "Never promise a delivery date." in out
    assert (
        '"policy_compliance": {' in out
        and "low_dimension alerts: policy_compliance below 70" in out
    )
    assert "+criteria-d1" in out
