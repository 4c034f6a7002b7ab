"""The generic-answer classifier quotes what it found as written.

Its patterns read a folded sentence (lower case, punctuation to spaces) and some take a few of
the answer's own words ("Checking … now", "Here is …"). What they found becomes a retry
request's `detected_pattern` and part of its reasons (and of a verdict's): quoted folded, a
secret in those words is lower-cased and split at its punctuation, and the masker recognises
most kinds no longer. Each answer below is filler with one secret inside the words a pattern
takes; through the worker's real response handler, no 6 characters of the secret, in any case
and folded or not, are left in the retry request, and the answer still gets its retry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.leaks import pieces, text_of
from tests.memory import memory_worker
from tests.test_rules import window_of
from tracejudge.judges.answers.families import families, normalise, strip_acknowledgements
from tracejudge.judges.answers.generic import assess_answer, classify
from tracejudge.judges.masking.redact import mask, masked_json
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.verdict.conclude import (
    DISABLED,
    Policy,
    WindowFacts,
    conclude,
    evaluator_version,
)

DATA = Path(__file__).resolve().parent / "data"
FRAGMENT = 6
SECRETS = {
    "openai_key": "sk-proj-Q7vX2mKp9LwR4tYb8NcZ3hJd6FgS1aEu5VoIx0Wq",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "email": "Margaret.Hamilton@Example-Corp.com",
    "card": "4111-1111-1111-1111",
}
PROMPT = "Fix the failing login test in tests/test_auth.py and rotate the leaked credentials"
# filler whose pattern takes the words after its head: an announcement, a lead-in, and a
# question to the user (clarification: quoted as a sentence, not through a pattern)
ANSWERS = {
    "announcement": "Checking the value {secret} now.",
    "lead_in": "Here is the value {secret}",
    "question": "Could you confirm that {secret} is the one to rotate?",
}


def leaked(found: Any, secret: str) -> list[str]:
    """Pieces of `secret` FRAGMENT long in any string of `found`, compared lower-cased and
    also folded as the classifier folds ("sk-proj-Q7vX" -> "sk proj q7vx"); masks taken out."""
    text = text_of(found).lower()
    folded = normalise(text)
    found_pieces = pieces(secret.lower(), FRAGMENT) | pieces(normalise(secret), FRAGMENT)
    return sorted(p for p in found_pieces if p in text or p in folded)


@pytest.mark.parametrize("shape", sorted(ANSWERS))
@pytest.mark.parametrize("kind", sorted(SECRETS))
async def test_no_fragment_of_a_secret_in_a_retry_request(kind: str, shape: str) -> None:
    secret = SECRETS[kind]
    text = ANSWERS[shape].format(secret=secret)
    # the case is what it claims: the classifier asks for a retry and found a pattern
    assessment = assess_answer(PROMPT, text)
    assert assessment.retry and assessment.classification.detected_pattern
    w = memory_worker()
    await w.response(
        {
            "type": "model_response",
            "session_id": "s-1",
            "prompt": PROMPT,
            "response": text,
            "attempt": 0,
        }
    )
    (retry,) = w.channel("retries").values()
    assert retry["type"] == "retry_request" and retry["detected_pattern"]
    assert leaked(retry, secret) == []


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        # the words a pattern took, as written: case and punctuation kept
        ("Checking the Deploy-Config now.", "Checking the Deploy-Config now"),
        ("Here is {key}", "Here is [REDACTED:api_key]"),
        # cut where a secret would be split, not through it
        ("Here is the value {key}", "Here is the value"),
        # Chinese: found with the spaces between characters taken out, quoted with its comma;
        # found in simplified characters, quoted in the traditional ones written
        ("抱歉，我无法帮助您。", "抱歉，我无法帮助您"),
        ("我正在為您分析這個問題……", "我正在為您分"),
        # a pattern of our own words only is quoted as before
        ("Could you please clarify?", "could you please clarify"),
    ],
)
def test_the_pattern_found_is_quoted_from_the_answer(text: str, quoted: str) -> None:
    found = assess_answer(PROMPT, text.format(key=SECRETS["openai_key"]))
    assert mask(found.classification.detected_pattern or "") == quoted


def test_every_pattern_found_in_the_labelled_answers_is_quoted_as_written() -> None:
    """What the classifier reports is the answer's own text as written, or our own words (a
    phrase of the families, acknowledgements alone, a fixed note), never the answer folded."""
    fam = families()
    ours = {*fam.clarification, *fam.filler, "ends announcing the work", "tool call", "…"}
    folded = []
    for name in ("generic_labelled.jsonl", "generic_frozen.jsonl"):
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            found = classify(row["response"], row["prompt"]).detected_pattern
            # (acknowledgements alone, "好的 没问题", are the families' words too)
            quoted = found is None or found in row["response"] or found in ours
            if not quoted and strip_acknowledgements(found or ""):
                folded.append(found)
    assert folded == []


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_no_fragment_of_a_secret_in_a_verdicts_reason(kind: str) -> None:
    # the rules quote the same pattern in an evaluation's reason ("final output is generic")
    secret = SECRETS[kind]
    output = ANSWERS["announcement"].format(secret=secret)
    window = window_of(
        [
            {"type": "task_started", "request_id": "r", "goal": PROMPT},
            {"type": "final_response", "request_id": "r", "output": output},
        ]
    )
    judge = RuleJudge()
    rules = judge.judge(window)
    assert "generic_answer" in [r for r, _ in rules.findings]
    verdict = conclude(
        WindowFacts.of(window), rules, DISABLED, Policy(), evaluator_version(judge.version), 0.0
    )
    published = json.loads(masked_json(verdict.evaluation))
    assert any("final output is generic" in r for r in published["reasons"])
    assert leaked(published, secret) == []


def test_no_kind_of_the_masking_corpus_leaks_through_a_pattern_found() -> None:
    """Each one-line text of the masking corpus as the words an announcement takes ("Checking
    my AWS access key id is AKIA…"): what the masker finds in the answer as written, it finds
    in the pattern quoted and the reasons (folded, 18 of the 34 kinds here were missed)."""
    kinds, leaks = set(), set()
    for line in (DATA / "redaction_corpus.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        text = "Checking " + row["text"]
        if "\n" in text or any(leaked(mask(text), s) for s in row["secrets"]):
            continue  # a sentence of its own, or missed by the masker whatever we quote
        found = assess_answer(PROMPT, text)
        if not (found.retry and found.classification.detected_pattern):
            continue
        kinds.add(row["kind"])
        quoted = [mask(found.classification.detected_pattern), *map(mask, found.reasons)]
        if any(leaked(quoted, s) for s in row["secrets"]):
            leaks.add(row["kind"])
    assert len(kinds) >= 20 and sorted(leaks) == []


async def test_a_pattern_found_inside_a_secret_quotes_none_of_it() -> None:
    # folded, the key's own words read "so i ll do that" (an announcement): its match starts
    # inside the key, where the rest of the key alone is no longer recognised as one
    secret = "sk-proj-So-I-ll-do-that-Q7vX2mKp9LwR4tYb8NcZ3hJd6FgS1aEu5VoIx0Wq"
    w = memory_worker()
    await w.response(
        {
            "type": "model_response",
            "session_id": "s-1",
            "prompt": PROMPT,
            "response": f"Rotated to {secret}",
            "attempt": 0,
        }
    )
    (retry,) = w.channel("retries").values()
    assert retry["detected_pattern"] and leaked(retry, secret) == []
