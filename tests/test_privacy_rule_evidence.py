"""A secret across the cut of a rule's evidence is not split: the rules quote the run
(an error, a sentence of the answer, a user's turn, a call's arguments) in findings, reasons and
remaining steps, cut to a few dozen characters, and those are masked only when the evaluation is
made. A fragment left by a cut through a secret is one the masker no longer recognises.

For each rule that quotes the run, a run with a secret (an API key, a JWT, an e-mail, a card
number) placed across the cut of that quote, judged by the rules and concluded: no 6 characters
of the secret survive in the evaluation or the reflection request, and the rule still fires."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.test_privacy_clipping import leaks
from tests.test_rules import window_of
from tracejudge.judges.masking.redact import mask
from tracejudge.judges.rules.judge import LOOP_RUN, RuleJudge
from tracejudge.judges.verdict.conclude import (
    DISABLED,
    Policy,
    WindowFacts,
    conclude,
    evaluator_version,
)

SECRETS = {
    "openai_key": "sk-proj-YSD0F7exeUnSCUNxs2GZbra570bf4x16Qm3Tt9",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "email": "margaret.hamilton.ops@examplecorp.com",
    "card": "4111 1111 1111 1111",
}
# no digit, no full stop, no question mark: nothing that ends a sentence or reads as a secret
PAD = "and the team looked at the whole thing again "


# of a secret, before the cut: too few for any detector (a key's head of 24 is still a key)
KEPT = 14


def across(raw: str, cut: int, lead: str = "", tail: str = " and nothing else") -> str:
    """`lead`, padding, `raw` straddling offset `cut`, then `tail`: the text a rule cuts at
    `cut` keeps KEPT characters of the secret."""
    start = cut - KEPT
    pad = (PAD * (start // len(PAD) + 1))[: start - len(lead) - 1] + " "  # a word of its own
    text = lead + pad + raw + tail
    assert text.index(raw) < cut < text.index(raw) + len(raw)
    return text


def task(goal: str = "build the project") -> dict[str, Any]:
    return {"type": "task_started", "request_id": "r", "goal": goal}


def call(
    i: int, tool: str, ok: bool, args: str = "run", error: str | None = None
) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "request_id": "r",
        "step_index": i,
        "tool": tool,
        "success": ok,
        "args_summary": args,
        "result_preview": "done" if ok else None,
        "error": None if ok else (error or f"{tool} broke"),
    }


def final(output: str) -> dict[str, Any]:
    return {"type": "final_response", "request_id": "r", "output": output}


def user(i: int, text: str) -> dict[str, Any]:
    return {"type": "user_message", "request_id": "r", "step_index": i, "text": text}


def stopped_at_limit(raw: str, cut: int) -> list[dict[str, Any]]:
    # the finding quotes the error (200), the reason its head (80)
    error = across(raw, cut, lead="step limit reached while ")
    return [task(), call(1, "bash", False, error=error), final("could not finish")]


def last_attempt_failed(raw: str, cut: int) -> list[dict[str, Any]]:
    error = across(raw, cut, lead="mvn failed: ")
    return [
        task(),
        call(1, "bash", False, "mvn test"),
        call(2, "bash", False, "mvn test -q", error=error),
        final("could not build"),
    ]


def claim_contradicts_result(raw: str, cut: int) -> list[dict[str, Any]]:
    return [
        task(),
        call(1, "bash", False, "pytest"),
        final(across(raw, cut, lead="All tests pass now ")),
    ]


def identical_call_loop(raw: str, cut: int) -> list[dict[str, Any]]:
    args = across(raw, cut, lead="curl -H ")
    return [task(), *(call(i, "http", True, args) for i in range(1, LOOP_RUN + 1)), final("ok")]


def claim_without_call(raw: str, cut: int) -> list[dict[str, Any]]:
    # the claim's sentence (200) and its head in the reason and the work left (120)
    return [
        task("cancel my order"),
        call(1, "cancel_order", False),
        final(across(raw, cut, lead="I have cancelled the order ")),
    ]


def pending_action(raw: str, cut: int) -> list[dict[str, Any]]:
    return [
        task("cancel my order"),
        call(1, "get_order", True),
        final(across(raw, cut, lead="I will cancel the order ")),
    ]


def unconfirmed_change(raw: str, cut: int) -> list[dict[str, Any]]:
    # the user's turn (120) in "update_plan after '…'", whose head (80) names a kind of
    # trouble; the error the run ended on (60) the other
    said = across(raw, cut, lead="maybe the plan ")
    return [
        task("change my plan"),
        user(1, "hello there"),
        user(2, said),
        call(3, "update_plan", True),
        call(4, "update_plan", False, error=across(raw, 60, lead="denied: ")),
        final("I tried"),
    ]


# asked for work: a question back is not a result
COMPLEX = "Write a detailed migration plan for our billing database, step by step, with rollback"


def clarification(raw: str, cut: int) -> list[dict[str, Any]]:
    return [task(COMPLEX), final(across(raw, cut, lead="Should I use ", tail=" for you?"))]


def folded(value: Any) -> Any:
    """Every string lower-cased, its masks kept as they are (`leaks` reads them)."""
    if isinstance(value, str):
        return re.sub(r"\[redacted:(\w+)\]", lambda m: f"[REDACTED:{m[1]}]", value.lower())
    if isinstance(value, dict):
        return {k: folded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [folded(v) for v in value]
    return value


# (the run, where its quote is cut, a finding the rules must still make)
CASES: dict[str, tuple[Callable[[str, int], list[dict[str, Any]]], tuple[int, ...], str]] = {
    "stopped_at_limit": (stopped_at_limit, (80, 200), "stopped_at_limit"),
    "last_attempt_failed": (last_attempt_failed, (80,), "last_attempt_failed"),
    "claim_contradicts_result": (claim_contradicts_result, (120,), "claim_contradicts_result"),
    "identical_call_loop": (identical_call_loop, (60,), "identical_call_loop"),
    "claim_without_call": (claim_without_call, (120, 200), "claim_without_call"),
    "pending_action": (pending_action, (120, 200), "pending_action"),
    "unconfirmed_change": (unconfirmed_change, (60, 120), "compound_trouble"),
    "clarification": (clarification, (60,), "clarification_answer"),
}


@pytest.mark.parametrize("kind", SECRETS)
@pytest.mark.parametrize(
    ("case", "cut"), [(case, cut) for case, (_, cuts, _) in CASES.items() for cut in cuts]
)
def test_a_secret_across_a_rules_quote_reaches_no_output(kind: str, case: str, cut: int) -> None:
    raw = SECRETS[kind]
    # whole, the masker finds it; its first KEPT characters, it does not
    assert leaks(mask(raw), raw) == [] and leaks(mask(raw[:KEPT]), raw)
    make, _, rule = CASES[case]
    window = window_of(make(raw, cut))
    judge = RuleJudge()
    rules = judge.judge(window)
    assert rule in [r for r, _ in rules.findings]
    verdict = conclude(
        WindowFacts.of(window), rules, DISABLED, Policy(), evaluator_version(judge.version), 0.0
    )
    published = [verdict.evaluation.model_dump(mode="json")]
    if verdict.reflection is not None:
        published.append(verdict.reflection.model_dump(mode="json"))
    published += [a.model_dump(mode="json") for a in verdict.alerts]
    assert leaks(published, raw) == []
    # nor lower-cased (a quote of a normalised sentence), which the masker would not recognise
    assert leaks(folded(published), raw.lower()) == []


@pytest.mark.parametrize("kind", SECRETS)
def test_a_question_quoted_as_the_pattern_found_is_quoted_as_written(kind: str) -> None:
    # no cut here: the pattern was the question normalised (lower case, punctuation folded),
    # in which the masker recognises no key, JWT or e-mail, and the reason quoted it
    raw = SECRETS[kind]
    window = window_of([task(COMPLEX), final(f"Should I use {raw} for you?")])
    rules = RuleJudge().judge(window)
    assert "clarification_answer" in [r for r, _ in rules.findings]
    verdict = conclude(WindowFacts.of(window), rules, DISABLED, Policy(), "v", 0.0)
    published = verdict.evaluation.model_dump(mode="json")
    assert leaks(folded(published), raw.lower()) == []
