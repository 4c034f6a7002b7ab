"""JSON nested deeper than a parser goes (a few kilobytes of `[{(`) is refused like any other
bad input, never a RecursionError out of the rules, the event reader or the client."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.test_intervention_reader import dead_address, recorder
from tests.test_rules import window_of
from tracejudge.client import InterventionReader
from tracejudge.judges.llm.answer import InvalidAnswer, parse_answer
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import parse_event
from tracejudge.streams.shared.visible import exact_json

DEEP = "[{" * 20_000 + "}]" * 20_000  # past the standard library's recursion limit
OPENS = "[{(" * 3_000  # what an agent's text can hold: openings, never closed


def test_an_event_nested_too_deeply_is_invalid_not_a_crash() -> None:
    with pytest.raises(InvalidEvent, match="not_json"):
        parse_event(DEEP)


@pytest.mark.parametrize("text", [DEEP, OPENS, "[" * 30_000])
def test_the_rules_judge_a_run_whose_texts_look_like_deep_json(text: str) -> None:
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": "r", "goal": text},
        {
            "type": "tool_call",
            "request_id": "r",
            "step_index": 1,
            "tool": "search",
            "success": True,
            "result_preview": text,
        },
        {"type": "final_response", "request_id": "r", "output": text},
    ]
    verdict = RuleJudge().judge(window_of(events))
    assert 0 <= verdict.rule_score <= 100


def test_a_judge_answer_nested_too_deeply_is_an_invalid_answer() -> None:
    call = {"function": {"name": "final_judge", "arguments": DEEP}}
    body = {"choices": [{"message": {"tool_calls": [call]}}]}
    with pytest.raises(InvalidAnswer):
        parse_answer(body)
    parse_content = {"choices": [{"message": {"content": "{" + DEEP + "}"}}]}
    with pytest.raises(InvalidAnswer):
        parse_answer(parse_content)


def test_the_client_and_the_terminal_skip_what_is_nested_too_deeply() -> None:
    reader = InterventionReader(dead_address(), "t.control", {}, warn_interval_s=3600)
    try:
        req, _ = recorder(reader)
        reader._take(req.request_id.encode(), DEEP.encode())
        assert not req.should_stop()
    finally:
        reader.close()
    assert json.loads(exact_json(DEEP + "\x1b")) == DEEP + "\x1b"
