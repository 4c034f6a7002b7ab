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
from tracejudge.prompts import final_judge_prompt

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
