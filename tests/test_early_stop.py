from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tracejudge.judges.inflight.early_stop import (
    Action,
    EarlyStopPolicy,
    Round,
    check_early_stop,
    errors_in,
    extract_tag,
    observation_success,
)

DATA = Path(__file__).parent / "data"
# the tuning half, and the frozen half the detector was not tuned on
SCENARIOS = json.loads((DATA / "early_stop_scenarios.json").read_text(encoding="utf-8"))
FROZEN = json.loads((DATA / "early_stop_frozen.json").read_text(encoding="utf-8"))


def replay(scenario: dict[str, Any]) -> list[list[Any]]:
    """Feed rounds one by one, as the worker sees them, remembering what was emitted."""
    policy = EarlyStopPolicy(scenario["min_iterations"], scenario["consecutive"])
    rounds: list[Round] = []
    emitted: set[Action] = set()
    decisions = []
    for raw in scenario["rounds"]:
        rounds.append(Round.read(**raw))
        decision = check_early_stop(rounds, policy, frozenset(emitted))
        if decision is not None:
            emitted.add(decision.action)
            decisions.append([decision.iteration, decision.action, decision.reason])
    return decisions


def test_there_are_at_least_30_labelled_scenarios_in_each_half() -> None:
    assert len(SCENARIOS) >= 30 and len(FROZEN) >= 30
    assert not {s["name"] for s in SCENARIOS} & {s["name"] for s in FROZEN}


@pytest.mark.parametrize(
    "scenario", SCENARIOS + FROZEN, ids=[s["name"] for s in SCENARIOS + FROZEN]
)
def test_labelled_scenario(scenario: dict[str, Any]) -> None:
    assert replay(scenario) == scenario["expected"]


@pytest.mark.parametrize(
    "observation",
    [
        "all tests pass",
        "All 42 tests passed in 3.1s",
        "tests passed",
        "File saved successfully.",
        "Submission created: #1234",
        "已保存",
        "全部通过",
        "测试通过，耗时 2 秒",
    ],
)
def test_the_seeds_success_signals_in_their_forms(observation: str) -> None:
    assert observation_success(observation)


@pytest.mark.parametrize(
    "observation",
    [
        "not all tests passed",
        "0 tests passed",
        "tests passed: 0",
        "3 tests passed, 1 failed",
        "12 tests passed, 10 failed",
        "未全部通过",
        "contests passed the committee",
    ],
)
def test_negated_zero_and_failing_forms_are_not_success(observation: str) -> None:
    assert observation_success(observation) is None


def test_tag_extraction_tolerates_case_spacing_and_an_unclosed_tag() -> None:
    assert extract_tag("<Conclusion>a</Conclusion>", "conclusion") == "a"
    assert extract_tag("< CONCLUSION >b< / conclusion >", "conclusion") == "b"
    assert extract_tag("x <Conclusion> c and more", "conclusion") == "c and more"
    assert extract_tag("no tag", "conclusion") is None


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        ("0 errors", []),
        ("error-free run", []),
        ("no exceptions were raised", []),
        ("Error: boom", ["Error"]),
        ("errors: 0", []),
        ("Saved successfully. ValueError: bad value", ["ValueError"]),
        ("saved successfully, but an error occurred while uploading", ["error"]),
        ("RuntimeError: x; tests passed", ["RuntimeError"]),
        ("Traceback (most recent call last)", ["Traceback"]),
        ("an exception occurred", ["exception"]),
        ("上传失败", ["失败"]),
        ("无失败", []),
    ],
)
def test_error_words_are_word_aware(text: str, errors: list[str]) -> None:
    assert errors_in(text) == errors


def test_evidence_is_short() -> None:
    assert observation_success("saved successfully " + "x" * 500) == "saved successfully"


@pytest.mark.parametrize(
    "observation",
    [
        "Saved successfully. ValueError: bad value",
        "saved successfully, but an error occurred while uploading",
        "RuntimeError: x; tests passed",
        "All tests passed. IOException on teardown",
        "测试通过，但上传报错",
    ],
)
def test_a_success_word_beside_an_error_is_not_success(observation: str) -> None:
    # the false early stop the adaptive-iteration design warns about
    assert observation_success(observation) is None


def test_a_round_is_read_once_into_signals_that_survive_its_text() -> None:
    read = Round.read(3, 5, "<Experiment>x</Experiment><Conclusion>done</Conclusion>", "ok")
    again = Round.of_record(3, 5, None, read.to_record())
    assert again == read
    assert again.conclusion == "done" and again.experiment


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_shipped_task_status_snippet_asks_for_what_the_detector_reads(language: str) -> None:
    from tracejudge.prompts import task_status_prompt

    snippet = task_status_prompt(language)
    assert "<TaskStatus>complete</TaskStatus>" in snippet and "<Conclusion>" in snippet
    # a loop that follows it: still going, then done with its conclusion
    going = Round.read(2, 5, "<TaskStatus>in_progress</TaskStatus><Experiment>x</Experiment>")
    done = Round.read(3, 5, "<Conclusion>found it</Conclusion><TaskStatus>complete</TaskStatus>")
    policy = EarlyStopPolicy()
    assert check_early_stop([going], policy) is None
    decision = check_early_stop([going, done], policy)
    assert decision is not None and (decision.action, decision.reason) == ("stop", "conclusion")
