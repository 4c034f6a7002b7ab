"""Is a model's answer generic filler, a clarifying question only, or substantive?

Phrase families live in prompts/generic_patterns.json. Substance is measured on what is left
once the sentences carrying a matched phrase are removed, so an answer that opens with a stock
phrase and then does the work is substantive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from tracejudge.judges.answer_families import (
    CJK,
    clarification_in,
    families,
    filler_in,
    normalise,
)
from tracejudge.judges.prompt_kind import is_chinese, prompt_is_complex

ResponseType = Literal["generic", "clarification", "substantive"]
# Sentences looked at for stock phrases: bounds the cost of an answer made of thousands of
# tiny sentences (each is matched against every phrase) without changing any real verdict.
PHRASE_SENTENCES = 64
_BOUNDARY = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])|\n")
_CODE = re.compile(r"```|^( {4}|\t)\S", re.MULTILINE)
_LIST = re.compile(r"^\s*(?:[-*•]|\d+[.)]|[一二三四五六七八九十]+、)\s+\S", re.MULTILINE)
# Each alternative that starts with a repeated class may only start where a run of that class
# starts (a lookbehind): tried at every position of a long run, it would be quadratic.
_ENTITY = re.compile(
    r"(?<![\d.])\d+(?:\.\d+)?"
    r"|(?<![\w-])[\w-]+\.(?:py|js|ts|go|rs|java|md|json|yaml|yml|toml|txt|sql|sh)\b"
    r"|`[^`]+`|(?<!\w)\w+\(\)|(?<![\w/.-])/\w[\w/.-]+|https?://\S+|\b[a-z]+_[a-z_]+\b"
)


@dataclass(frozen=True)
class Classification:
    response_type: ResponseType
    detected_pattern: str | None
    substance: int
    reasons: list[str] = field(default_factory=list)

    def should_retry(self, prompt_complex: bool) -> bool:
        if self.response_type == "generic":
            return True
        return self.response_type == "clarification" and prompt_complex


def substance(text: str) -> int:
    """Points for content: code, lists, several lines, concrete entities, length."""
    points = 0
    if _CODE.search(text):
        points += 3
    if len(_LIST.findall(text)) >= 2:
        points += 2
    if sum(1 for line in text.splitlines() if line.strip()) >= 3:
        points += 1
    points += min(2, len(_ENTITY.findall(text)))
    size = len(CJK.findall(text)) * 3 + len(re.findall(r"[A-Za-z0-9]+", text)) * 5
    points += 2 if size >= 200 else 1 if size >= 60 else 0
    return points


def sentences(text: str) -> list[str]:
    """Sentences and lines; a full stop inside "tests/test_api.py" or "3.11" does not end one."""
    return [s for s in _BOUNDARY.split(text) if s and s.strip()]


def new_content(remainder: str, prompt: str) -> tuple[int, int]:
    """(English words, Chinese characters) of the remainder that are neither assistant-speak
    nor already in the prompt."""
    meta = families().meta_words
    asked = set(normalise(prompt).split())
    words = [w for w in re.findall(r"[a-z0-9]+", remainder.lower()) if w not in meta]
    fresh = [w for w in words if w not in asked and (len(w) > 1 or w.isdigit())]
    return len(fresh), len(CJK.findall(remainder))


def classify(response: str, prompt: str = "") -> Classification:
    kept: list[str] = []
    generic_hit = clarification_hit = None
    for i, sentence in enumerate(sentences(response)):
        norm = normalise(sentence)
        if not norm:
            continue
        if i >= PHRASE_SENTENCES:  # stock phrases open an answer: the rest is only kept
            kept.append(sentence)
            continue
        c = clarification_in(sentence, norm)
        g = None if c else filler_in(sentence, norm)
        generic_hit = generic_hit or g
        clarification_hit = clarification_hit or c
        if not g and not c:
            kept.append(sentence)
    # substance is measured on what is left once every filler and question sentence is gone
    remainder = "\n".join(s.strip() for s in kept)
    points = substance(remainder) + (3 if _CODE.search(response) else 0)
    words, hanzi = new_content(remainder, prompt)
    # something new beyond filler: a word or a number the prompt did not already say
    meaningful = points >= 2 or words >= 1 or hanzi >= 6
    # enough to be an answer that also asks: explains, lists, gives the options
    substantial = points >= 2 or words >= 8 or hanzi >= 20
    if not normalise(response):
        return Classification("generic", None, 0, ["the answer is empty"])
    if clarification_hit and not substantial:
        reasons = [f"asks for clarification ('{clarification_hit}') without doing any work"]
        if generic_hit:
            reasons.append(f"and otherwise only filler ('{generic_hit}')")
        return Classification("clarification", clarification_hit, points, reasons)
    if generic_hit and not meaningful:
        return Classification(
            "generic",
            generic_hit,
            points,
            [f"only filler ('{generic_hit}'), nothing of substance left without it"],
        )
    if generic_hit or clarification_hit:
        return Classification(
            "substantive",
            generic_hit or clarification_hit,
            points,
            [
                f"has filler or a question ('{generic_hit or clarification_hit}') and "
                f"substance without it ({points} points: {_describe(remainder)})"
            ],
        )
    return Classification("substantive", None, points, [f"substance: {_describe(remainder)}"])


def _describe(text: str) -> str:
    parts = []
    if _CODE.search(text):
        parts.append("code")
    if len(_LIST.findall(text)) >= 2:
        parts.append("a list")
    entities = _ENTITY.findall(text)
    if entities:
        parts.append("entities such as " + ", ".join(repr(e) for e in entities[:3]))
    parts.append(f"{len(text)} characters")
    return ", ".join(parts)


@dataclass(frozen=True)
class AnswerAssessment:
    classification: Classification
    prompt_complex: bool
    retry: bool
    reasons: list[str]


def assess_answer(prompt: str, response: str) -> AnswerAssessment:
    c = classify(response, prompt)
    complex_ = prompt_is_complex(prompt)
    retry = c.should_retry(complex_)
    reasons = list(c.reasons)
    if c.response_type == "clarification":
        reasons.append(
            "the prompt is a concrete task, so a question alone is not an answer"
            if complex_
            else "the prompt is vague, so asking what is wanted is the right answer"
        )
    return AnswerAssessment(c, complex_, retry, reasons)


def continue_prompt(prompt: str) -> str:
    return "继续" if is_chinese(prompt) else "Please continue and complete the task."
