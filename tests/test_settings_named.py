"""Every configuration error begins with the setting it is about, or with "settings:" when it
is about several: never an empty name (`TRACEJUDGE_:`), as a check across settings (a model
validator, which has no field of its own) used to give."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from tracejudge.settings import PREFIX, Settings, SettingsError, load_settings

KNOWN = {PREFIX + name.upper() for name in Settings.model_fields}
PRICES = ("TRACEJUDGE_LLM_PRICE_INPUT_PER_MTOK", "TRACEJUDGE_LLM_PRICE_OUTPUT_PER_MTOK")


def problems(monkeypatch: pytest.MonkeyPatch, **given: str) -> list[str]:
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    return caught.value.problems


def named(problem: str) -> str:
    """The setting a problem begins with, or "settings" (it must begin with one of them)."""
    found = re.match(r"(settings|TRACEJUDGE_[A-Z0-9_]+)(=|: )", problem)
    assert found is not None, problem
    assert found[1] == "settings" or found[1] in KNOWN, problem
    return found[1]


@pytest.mark.parametrize(
    ("given", "about", "says"),
    [
        (
            {"TRACEJUDGE_LLM_PRICE_INPUT_PER_MTOK": "0.15"},
            "TRACEJUDGE_LLM_PRICE_OUTPUT_PER_MTOK",
            "unset while TRACEJUDGE_LLM_PRICE_INPUT_PER_MTOK is set",
        ),
        (
            {"TRACEJUDGE_LLM_PRICE_OUTPUT_PER_MTOK": "0.6"},
            "TRACEJUDGE_LLM_PRICE_INPUT_PER_MTOK",
            "unset while TRACEJUDGE_LLM_PRICE_OUTPUT_PER_MTOK is set",
        ),
        ({"TRACEJUDGE_LOOP_REPEAT": "1"}, "TRACEJUDGE_LOOP_REPEAT", "loop rule repeat=1"),
        ({"TRACEJUDGE_LOOP_CYCLES": "1"}, "TRACEJUDGE_LOOP_CYCLES", "loop rule cycles=1"),
        (
            {"TRACEJUDGE_LOOP_NO_NEW_RESULT": "1"},
            "TRACEJUDGE_LOOP_NO_NEW_RESULT",
            "loop rule no_new_result=1",
        ),
        (
            {"TRACEJUDGE_BUDGETS_FILE": "/nonexistent/budgets.toml"},
            "TRACEJUDGE_BUDGETS_FILE",
            "No such file",
        ),
    ],
)
def test_a_check_across_settings_names_the_one_it_is_about(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, str], about: str, says: str
) -> None:
    [problem] = problems(monkeypatch, **given)
    assert named(problem) == about and says in problem, problem
    assert problem.startswith(f"{about}: ")


@pytest.mark.parametrize(
    ("given", "mentions"),
    [
        (
            {"TRACEJUDGE_LLM_BUDGET_USD_PER_DAY": "3"},
            ("TRACEJUDGE_LLM_BUDGET_USD_PER_DAY", *PRICES),
        ),
        (
            {"TRACEJUDGE_LLM_BUDGET_USD_PER_MINUTE": "1", "TRACEJUDGE_LLM_BUDGET_USD_PER_DAY": "3"},
            ("TRACEJUDGE_LLM_BUDGET_USD_PER_MINUTE", "TRACEJUDGE_LLM_BUDGET_USD_PER_DAY", *PRICES),
        ),
        (
            {"TRACEJUDGE_LLM_CONTEXT_TOKENS": "2048", "TRACEJUDGE_LLM_MAX_TOKENS": "1024"},
            ("TRACEJUDGE_LLM_CONTEXT_TOKENS (2048)", "TRACEJUDGE_LLM_MAX_TOKENS=1024"),
        ),
        (
            {
                "TRACEJUDGE_LLM_CONTEXT_TOKENS": "2048",
                "TRACEJUDGE_LLM_OUTPUT_RESERVE_TOKENS": "1500",
            },
            ("TRACEJUDGE_LLM_CONTEXT_TOKENS (2048)", "TRACEJUDGE_LLM_OUTPUT_RESERVE_TOKENS=1500"),
        ),
    ],
)
def test_a_check_about_several_settings_says_settings_and_names_each(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, str], mentions: tuple[str, ...]
) -> None:
    [problem] = problems(monkeypatch, **given)
    assert named(problem) == "settings" and problem.startswith("settings: "), problem
    assert "Value error" not in problem
    for mention in mentions:
        assert mention in problem, problem


def test_every_problem_of_a_bad_file_begins_with_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Field errors and a check across settings at once, from a settings file."""
    config = tmp_path / "judge.env"
    config.write_text(
        "TRACEJUDGE_PARTITIONS=zero\nTRACEJUDGE_LLM_PRICE_INPUT_PER_MTOK=0.15\n", encoding="utf-8"
    )
    with pytest.raises(SettingsError) as caught:
        load_settings(str(config))
    names = [named(problem) for problem in caught.value.problems]
    assert "TRACEJUDGE_PARTITIONS" in names
    assert all(not p.startswith(f"{PREFIX}:") for p in caught.value.problems)


def test_settings_made_in_code_name_the_setting_too() -> None:
    """Without load_settings' lines (a Settings(...) in a test or a script), pydantic's own
    message names the one setting a check is about."""
    with pytest.raises(ValidationError) as caught:
        Settings(llm_price_input_per_mtok=0.15)
    assert "TRACEJUDGE_LLM_PRICE_OUTPUT_PER_MTOK: unset while" in str(caught.value)
