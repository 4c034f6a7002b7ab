"""A team's criteria for the LLM judge, per agent: in the system message the model server gets
(outside the run's fenced data), named with their version in the evaluation's provenance, and
a cached answer under other criteria never taken."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_llm import FakeLLM, tool_call_reply, verdict
from tests.test_judge_usage import job, stage_for
from tracejudge.judges.llm.criteria import CriteriaBook, CriteriaError, with_criteria
from tracejudge.judges.llm.prompt import cache_key
from tracejudge.judges.verdict.conclude import conclude
from tracejudge.prompts import final_judge_prompt
from tracejudge.streams.explorer.show import render

CRITERIA = """
[default]
criteria = "Answer in full sentences."

[agents."support-*"]
version = "2026-11-27"
criteria = "Never promise a delivery date."
bad_example = "Promised delivery by Friday."
"""


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def test_an_agents_criteria_join_the_judges_instructions_with_their_version(tmp_path: Path) -> None:
    path = tmp_path / "criteria.toml"
    path.write_text(CRITERIA)
    book = CriteriaBook.read(path)
    mine, other = book.for_agent("support-bot"), book.for_agent("coder")
    assert mine is not None and mine.version == "2026-11-27"
    assert other is not None and other.text == "Answer in full sentences."
    base = final_judge_prompt()
    prompt = with_criteria(base, mine)
    assert prompt.system.startswith(base.system.rstrip())
    assert "Never promise a delivery date." in prompt.system and "by Friday" in prompt.system
    assert prompt.version == f"{base.version}+criteria-2026-11-27"
    assert with_criteria(base, None) is base


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[default]\ncriterion = "x"\n', "unknown key(s) criterion"),
        ('[agents."a"]\nversion = "1"\n', "criteria is missing"),
        ('[default]\ncriteria = ""\n', "non-empty string"),
        ('[default]\ndimensions = {correctness = "x"}\n', "'correctness' is taken"),
        ('[default]\ndimensions = {"Policy" = "x"}\n', "not a dimension name"),
        ("[default]\ndimensions = {policy = 3}\n", "policy must say what the judge scores"),
        ('[default]\ndimensions = "policy"\n', "must be a table"),
        (
            "[default]\ndimensions = {" + ", ".join(f'd{i} = "x"' for i in range(5)) + "}\n",
            "5 dimensions (at most 4)",
        ),
    ],
)
def test_a_bad_criteria_file_is_one_error(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "criteria.toml"
    path.write_text(text)
    with pytest.raises(CriteriaError) as raised:
        CriteriaBook.read(path)
    assert says in str(raised.value)


async def test_the_model_server_gets_the_agents_criteria_and_the_evaluation_names_them(
    fake: FakeLLM, tmp_path: Path
) -> None:
    path = tmp_path / "criteria.toml"
    path.write_text('[default]\nversion = "v7"\ncriteria = "Never promise a delivery date."\n')
    fake.script = lambda body, n: tool_call_reply(verdict(True, False, 90))
    stage = stage_for(fake, llm_criteria_file=str(path))
    try:
        outcome = await stage.outcome(job())
    finally:
        await stage.client.aclose()
    assert outcome.status == "ok" and outcome.call is not None
    (sent,) = fake.requests
    system, user = sent["messages"]
    assert system["role"] == "system" and "Never promise a delivery date." in system["content"]
    assert "Never promise a delivery date." not in user["content"]  # not in the run's data
    assert outcome.call.criteria_version == "v7"
    assert outcome.call.prompt_version.endswith("+criteria-v7")


DIMENSIONS = """
[default]
version = "d1"
criteria = "Never promise a delivery date."
dimensions = { policy_compliance = "Does the run follow the delivery policy?" }
"""


def test_an_agents_dimensions_are_asked_for_in_the_answer_schema(tmp_path: Path) -> None:
    path = tmp_path / "criteria.toml"
    path.write_text(DIMENSIONS)
    criteria = CriteriaBook.read(path).for_agent("any")
    base = final_judge_prompt()
    prompt = with_criteria(base, criteria)
    assert prompt.schema["properties"]["policy_compliance"]["maximum"] == 100
    assert "policy_compliance" in prompt.schema["required"]
    assert "policy_compliance" not in base.schema["properties"]  # the shared schema untouched
    assert "- policy_compliance: Does the run follow the delivery policy?" in prompt.system
    assert prompt.dimensions == ("policy_compliance",)
    # the same version with other dimensions is another cache entry
    path.write_text(DIMENSIONS.replace("delivery policy", "refund policy"))
    other = with_criteria(base, CriteriaBook.read(path).for_agent("any"))
    assert other.version == prompt.version
    assert cache_key("run", other, "m") != cache_key("run", prompt, "m")
    assert cache_key("run", base, "m") == cache_key("run", final_judge_prompt(), "m")


async def test_the_judge_scores_an_agents_dimensions_into_the_evaluation(
    fake: FakeLLM, tmp_path: Path
) -> None:
    path = tmp_path / "criteria.toml"
    path.write_text(DIMENSIONS)
    # the model also gives a score nobody asked for: it is not kept
    fake.script = lambda body, n: tool_call_reply(
        verdict(True, False, 90, policy_compliance=30, made_up=100)
    )
    stage = stage_for(fake, llm_criteria_file=str(path))
    try:
        the_job = job()
        outcome = await stage.outcome(the_job)
    finally:
        await stage.client.aclose()
    (sent,) = fake.requests
    tool = sent["tools"][0]["function"]["parameters"]
    assert "policy_compliance" in tool["required"]
    assert outcome.answer is not None and outcome.answer.criteria_scores == {
        "policy_compliance": 30
    }
    evaluation = conclude(the_job.facts, the_job.rules, outcome, stage.policy, "v", 0.0).evaluation
    published = evaluation.model_dump(mode="json")["dimension_scores"]
    assert published["criteria"] == {"policy_compliance": 30}
    assert published["correctness"] == 90
    # the judge's score counts the team's dimension like its own: (90 * 3 + 30) / 4 = 75
    assert outcome.answer.llm_score == 75
    without = outcome.answer.model_copy(update={"criteria_scores": {}})
    assert without.llm_score == 90
    shown = render(evaluation.model_dump(mode="json"), [])
    assert "correctness 90" in shown and "policy_compliance 30 (the team's)" in shown
