"""Is a model's answer generic filler, a clarifying question only, or substantive?

Phrase families live in prompts/generic_patterns.json. Substance is measured on what is left
once the sentences carrying a matched phrase are removed, so an answer that opens with a stock
phrase and then does the work is substantive.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

from tracejudge.prompts import read_prompt

ResponseType = Literal["generic", "clarification", "substantive"]
# Sentences looked at for stock phrases: bounds the cost of an answer made of thousands of
# tiny sentences (each is matched against every phrase) without changing any real verdict.
PHRASE_SENTENCES = 64
_CJK = re.compile(r"[\u3400-\u9fff]")
_SENTENCE = re.compile(r"[^.!?。！？…\n]+[.!?。！？…]*")
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
class Families:
    clarification: tuple[str, ...]
    filler: tuple[str, ...]
    filler_patterns: tuple[re.Pattern[str], ...]
    acknowledgements: tuple[str, ...]
    task_verbs: tuple[str, ...]
    not_an_object: frozenset[str]
    question_words: tuple[str, ...]


def normalise(text: str) -> str:
    """Lower case, punctuation and spacing folded: "Ready  to assist!" -> "ready to assist"."""
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


@cache
def families() -> Families:
    data = json.loads(read_prompt("generic_patterns.json"))
    return Families(
        clarification=tuple(normalise(p) for p in data["clarification"]),
        filler=tuple(normalise(p) for p in data["filler"]),
        filler_patterns=tuple(re.compile(p) for p in data["filler_patterns"]),
        # longest first, so "明白了" is stripped whole rather than "明白" leaving "了"
        acknowledgements=tuple(
            sorted((normalise(p) for p in data["acknowledgements"]), key=len, reverse=True)
        ),
        task_verbs=tuple(normalise(p) for p in data["task_verbs"]),
        not_an_object=frozenset(normalise(p) for p in data["not_an_object"]),
        question_words=tuple(normalise(p) for p in data["question_words"]),
    )


def _contains(text: str, phrase: str) -> bool:
    if _CJK.search(phrase):
        return phrase in text.replace(" ", "") or phrase in text
    return re.search(rf"(?<![a-z0-9]){re.escape(phrase)}(?![a-z0-9])", text) is not None


def _first(text: str, phrases: tuple[str, ...]) -> str | None:
    return next((p for p in phrases if _contains(text, p)), None)


def _strip_acknowledgements(norm: str) -> str:
    """ "ok sure here it is" -> "here it is"; "好的 没问题" -> ""."""
    fam = families()
    changed = True
    while norm and changed:
        changed = False
        for ack in fam.acknowledgements:
            if _CJK.search(ack):
                if norm.startswith(ack):
                    norm, changed = norm[len(ack) :].strip(), True
                    break
            elif norm == ack or norm.startswith(ack + " "):
                norm, changed = norm[len(ack) :].strip(), True
                break
    return norm


def filler_in(norm: str) -> str | None:
    """What makes a folded sentence filler (courtesy, readiness, capability, an announcement
    with no result, a bare acknowledgement), or None when it says something."""
    fam = families()
    hit = _first(norm, fam.filler)
    if hit:
        return hit
    rest = _strip_acknowledgements(norm)
    if not rest:
        return norm
    for pattern in fam.filler_patterns:
        found = pattern.search(rest)
        if found:
            return found.group(0)
    return None


def is_chinese(text: str) -> bool:
    return len(_CJK.findall(text)) >= max(1, len(text) // 10)


def prompt_is_complex(prompt: str) -> bool:
    """A real task: long; a task verb with something to act on ("fix this", "翻译这段话";
    a bare "Summarize", "翻译" or "test" is not); or a specific question."""
    if len(prompt) >= 120 or (is_chinese(prompt) and len(prompt) >= 40):
        return True
    fam = families()
    norm = normalise(prompt)
    verb = _first(norm, fam.task_verbs)
    if verb is not None and _has_object(norm, verb, fam):
        return True
    words = norm.split()
    if _CJK.search(norm):
        asks = any(q in norm for q in fam.question_words if _CJK.search(q))
        return asks and len(_CJK.findall(norm)) >= 6
    if not words or words[0] not in fam.question_words:
        return False
    topic = [w for w in words if len(w) >= 3 and w not in fam.not_an_object | {*fam.question_words}]
    return len(topic) >= 2


def _has_object(norm: str, verb: str, fam: Families) -> bool:
    if _CJK.search(verb):
        rest = norm.replace(" ", "").replace(verb, "", 1)
        for word in sorted(fam.not_an_object, key=len, reverse=True):
            rest = rest.replace(word, "")
        return len(rest) >= 1
    rest = re.sub(rf"(?<![a-z0-9]){re.escape(verb)}(?![a-z0-9])", " ", norm, count=1)
    return any(word not in fam.not_an_object for word in rest.split())


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
    size = len(_CJK.findall(text)) * 3 + len(re.findall(r"[A-Za-z0-9]+", text)) * 5
    points += 2 if size >= 200 else 1 if size >= 60 else 0
    return points


def classify(response: str) -> Classification:
    fam = families()
    kept: list[str] = []
    generic_hit = clarification_hit = None
    for i, sentence in enumerate(_SENTENCE.findall(response)):
        norm = normalise(sentence)
        if not norm:
            continue
        if i >= PHRASE_SENTENCES:  # stock phrases open an answer: the rest is only kept
            kept.append(sentence)
            continue
        c = _first(norm, fam.clarification)
        g = None if c else filler_in(norm)
        generic_hit = generic_hit or g
        clarification_hit = clarification_hit or c
        if not g and not c:
            kept.append(sentence)
    # substance is measured on what is left once every filler and question sentence is gone
    remainder = "\n".join(s.strip() for s in kept)
    points = substance(remainder) + (3 if _CODE.search(response) else 0)
    meaningful = len(normalise(remainder).replace(" ", "")) >= 10
    if not normalise(response):
        return Classification("generic", None, 0, ["the answer is empty"])
    if clarification_hit and points < 2:
        reasons = [f"asks for clarification ('{clarification_hit}') without doing any work"]
        if generic_hit:
            reasons.append(f"and otherwise only filler ('{generic_hit}')")
        return Classification("clarification", clarification_hit, points, reasons)
    if generic_hit and not meaningful and points < 2:
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
    c = classify(response)
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
