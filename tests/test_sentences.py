"""What the rules quote from an answer (evidence, remaining steps) is whole sentences: a full
stop in a price, a version or an abbreviation does not cut one."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tracejudge.judges.rules.claims import admitted_failure, claimed_actions
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.text.sentences import sentence_at, sentences
from tracejudge.models.events import parse_event
from tracejudge.models.window import assemble_window


def judged(output: str) -> Any:
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": "r", "step_index": 0, "goal": "refund order 7"},
        {
            "type": "tool_call",
            "request_id": "r",
            "step_index": 1,
            "tool": "get_order",
            "args_summary": '{"id": 7}',
            "success": True,
            "result_preview": "order 7: 54.90 USD",
        },
        {"type": "final_response", "request_id": "r", "output": output},
    ]
    window = assemble_window(
        "r",
        [parse_event(json.dumps(e).encode()) for e in events],
        closed_by="final_response",
        step_count=1,
        steps_dropped=0,
    )
    return RuleJudge().judge(window)


@pytest.mark.parametrize(
    ("output", "remaining"),
    [
        (
            "I found order 7. The refund of $54.90 still needs to be processed.",
            "The refund of $54.90 still needs to be processed.",
        ),
        (
            "The order is approved. Dr. Smith will still need to sign the form.",
            "Dr. Smith will still need to sign the form.",
        ),
        (
            "Version 3.11.2 is installed, e.g. on the build host. The deploy still needs to run.",
            "The deploy still needs to run.",
        ),
        ("订单已找到。退款还需要人工处理。", "退款还需要人工处理。"),
    ],
)
def test_the_evidence_that_work_remains_is_a_whole_sentence(output: str, remaining: str) -> None:
    verdict = judged(output)
    assert ("says_work_remains", remaining) in verdict.findings


def test_evidence_of_an_admitted_failure_keeps_its_sentence() -> None:
    text = "Mr. Lee asked for $54.90 back. I was unable to refund the $54.90 charge. Sorry."
    assert admitted_failure(text) == "I was unable to refund the $54.90 charge."


def test_a_claim_is_quoted_whole() -> None:
    (claim,) = claimed_actions("Hi. I have refunded $54.90 to Dr. Smith's card.")
    assert claim.evidence == "I have refunded $54.90 to Dr. Smith's card."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I said no. Then I left.", ["I said no.", "Then I left."]),
        ("See No. 7 today. Done", ["See No. 7 today.", "Done"]),
        ("J. Smith signed. Next?", ["J. Smith signed.", "Next?"]),
        (
            'He said "stop." Then he went.\nA new line',
            ['He said "stop."', "Then he went.", "A new line"],
        ),
        ("已完成。还需要退款！好", ["已完成。", "还需要退款！", "好"]),
        ("Edit tests/test_api.py and run it.", ["Edit tests/test_api.py and run it."]),
    ],
)
def test_sentences(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


def test_sentence_at_clips() -> None:
    text = "Short. " + "x" * 300 + " end."
    assert sentence_at(text, 10) == ("x" * 300 + " end.")[:200]
    assert sentence_at(text, 0) == "Short."
