"""Is a model's answer generic filler, a clarifying question only, or substantive?

Phrase families live in prompts/generic_patterns.json. Substance is measured on what is left
once the sentences carrying a matched phrase are removed, so an answer that opens with a stock
phrase and then does the work is substantive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from tracejudge.judges.answers.families import (
    CJK,
    announcement_in,
    asks_for_code,
    asks_for_missing_input,
    asks_for_text,
    asks_who_it_is,
    clarification_in,
    continues,
    families,
    filler_in,
    first,
    fold_chinese,
    is_the_requested_text,
    normalise,
    states_content,
    vague_step,
)
from tracejudge.judges.answers.prompt_kind import is_chinese, prompt_is_complex
from tracejudge.judges.text.sentences import sentences

ResponseType = Literal["generic", "clarification", "substantive"]
# The generic/clarification design applies its phrase patterns to answers under 800 characters
# only: an answer that long has said something, whatever phrase it opens or closes with.
PATTERN_LIMIT = 800
# Sentences looked at for stock phrases: bounds the cost of an answer made of thousands of
# tiny sentences (each is matched against every phrase) without changing any real verdict.
PHRASE_SENTENCES = 64
_YES_NO = re.compile(
    r"(?:^|[:：,，;]\s*)(?:is|are|was|were|do|does|did|can|could|should|would|will|has|have|had|"
    r"may|might|must)\b|\byes or no\b|吗[？?]?$|是否|是不是|能不能|可不可以|会不会|有没有|对不对",
    re.IGNORECASE,
)
# markdown that is only a skeleton: headings, bold labels, empty list items, empty code blocks
_SKELETON = re.compile(
    r"^\s*(?:#{1,6}\s.*|\*\*[^*\n]{0,60}:?\*\*:?|(?:[-*•]|\d+[.)])\s*)$|```\w*\s*```"
    r"|^\s*<[^>\n]{0,40}>\s*$",
    re.MULTILINE,
)
_MARKER = re.compile(
    r"^\s*(?:[-*•●]|\d+[.)、]|[一二三四五六七八九十]+、|step \d+:?)\s*", re.IGNORECASE
)
_CLAUSE_TAIL = re.compile(r"[，；,;]")
# (a name may only start where a word starts: tried inside a long token it would be quadratic)
_CODEISH = re.compile(
    r"`[^`\n]+`|(?<!\w)[A-Za-z_]\w*\([^)]*\)|[=<>]=?\s*[\w\"(]|[{}\[\];]|->|=>|::"
)
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
    elif _CODEISH.search(text):
        points += 2  # a formula or an expression: =SUMIF(A:A,"Paid",B:B), O(n log n)
    if len(_LIST.findall(text)) >= 2:
        points += 2
    if sum(1 for line in text.splitlines() if line.strip()) >= 3:
        points += 1
    points += min(2, len(_ENTITY.findall(text)))
    size = len(CJK.findall(text)) * 3 + len(re.findall(r"[A-Za-z0-9]+", text)) * 5
    points += 2 if size >= 200 else 1 if size >= 60 else 0
    return points


@dataclass(frozen=True)
class Content:
    """What the remainder says that is neither assistant-speak nor already in the prompt."""

    words: int  # English words
    fresh_words: int
    hanzi: int  # Chinese characters
    fresh_hanzi: int

    @property
    def meaningful(self) -> bool:
        """Something new: mostly new words (a short answer, "Canberra."), or many of them."""
        english = self.fresh_words >= 6 or (
            self.fresh_words >= 1 and self.fresh_words >= 0.3 * self.words
        )
        chinese = self.fresh_hanzi >= 12 or (
            self.fresh_hanzi >= 2 and self.fresh_hanzi >= 0.3 * self.hanzi
        )
        return english or chinese

    @property
    def substantial(self) -> bool:
        """Enough to be an answer that also asks: explains, lists, gives the options."""
        return self.fresh_words >= 8 or self.fresh_hanzi >= 16


def new_content(remainder: str, prompt: str) -> Content:
    fam = families()
    asked = set(normalise(prompt).split())
    # words the prompt did not say: the share of them that is not assistant-speak
    words = [w for w in re.findall(r"[a-z0-9]+", remainder.lower()) if w not in asked]
    fresh = [w for w in words if w not in fam.meta_words and (len(w) > 1 or w.isdigit())]
    # a number or a name the prompt did not give is an answer ("5432", "Ottawa")
    if any(w.isdigit() for w in fresh):
        fresh += ["#"] * 5
    folded = fold_chinese(remainder)
    prompt_hanzi = set(CJK.findall(fold_chinese(prompt)))
    hanzi = [c for c in CJK.findall(folded) if c not in prompt_hanzi]
    fresh_hanzi = [c for c in CJK.findall(fam.meta_hanzi.sub("", folded)) if c not in prompt_hanzi]
    return Content(len(words), len(fresh), len(hanzi), len(fresh_hanzi))


def classify(response: str, prompt: str = "") -> Classification:
    # characters (not bytes) of the stripped answer, as every length here: 800 hanzi count 800,
    # and padding with blank lines does not lift filler over the gate
    length = len(response.strip())
    if length >= PATTERN_LIMIT:
        return Classification(
            "substantive",
            None,
            substance(response),
            [
                f"a long answer ({length} characters): the filler and clarification patterns "
                f"apply only under {PATTERN_LIMIT}"
            ],
        )
    if not asks_for_text(prompt):  # a requested template is a skeleton
        response = _SKELETON.sub("", response)
    kept: list[str] = []
    generic_hit = clarification_hit = None
    answered = False
    last_announces = False  # the answer ends promising work ("下面我将为你创作…，希望你喜欢。")
    # a translation or a requested greeting is made of courtesy: it is the product, not filler
    wants_text = asks_for_text(prompt) and is_the_requested_text(response, prompt)
    yes_no = _YES_NO.search(prompt.strip()) is not None
    about_itself = asks_who_it_is(prompt)
    parts = sentences(response)
    for i, sentence in enumerate(parts):
        # "1. Read the file": the list marker is not content
        item = _MARKER.match(sentence) is not None
        norm = normalise(_MARKER.sub("", sentence))
        if not norm:
            continue
        if item and not wants_text and vague_step(sentence, norm):
            generic_hit = generic_hit or vague_step(sentence, norm)
            continue
        if i >= PHRASE_SENTENCES:  # stock phrases open an answer: the rest is only kept
            kept.append(sentence)
            continue
        clauses = _CLAUSE_TAIL.split(sentence) if CJK.search(sentence) else [sentence]
        announces = any(announcement_in(normalise(c)) for c in clauses) or bool(
            families().tool_echo.search(sentence)
        )
        last_announces = (
            (announces and not continues(sentence))
            or (last_announces and bool(first(norm, families().filler)))
            # a lead-in that ends the answer: "Here's the refactored code:" and nothing after
            or (i == len(parts) - 1 and sentence.rstrip().endswith((":", "：")))
        )
        if states_content(norm, yes_no):
            answered = True
            kept.append(sentence)
            continue
        if wants_text:
            c = g = None
        else:
            c = clarification_in(sentence, norm)
            g = None if c else filler_in(sentence, norm, about_itself=about_itself)
        generic_hit = generic_hit or g
        clarification_hit = clarification_hit or c
        if not g and not c:
            kept.append(sentence)
    # substance is measured on what is left once every filler and question sentence is gone
    remainder = "\n".join(s.strip() for s in kept)
    points = substance(remainder) + (3 if _CODE.search(response) else 0)
    content = new_content(remainder, prompt)
    meaningful = answered or points >= 2 or content.meaningful or (wants_text and bool(kept))
    substantial = points >= 2 or content.substantial
    if not normalise(response):
        return Classification("generic", None, 0, ["the answer is empty"])
    if clarification_hit and not substantial:
        reasons = [f"asks for clarification ('{clarification_hit}') without doing any work"]
        if generic_hit:
            reasons.append(f"and otherwise only filler ('{generic_hit}')")
        return Classification("clarification", clarification_hit, points, reasons)
    # an answer that says nothing new is filler, whether or not a known phrase was found; so
    # is one that ends announcing the work, with no code, list or figures before it
    if last_announces and points < 2 and not answered and not wants_text:
        meaningful = False
        generic_hit = generic_hit or "ends announcing the work"
    # asked for code, answered in prose that is neither a question nor long: no deliverable
    if (
        asks_for_code(prompt)
        and not _CODE.search(response)
        and not _CODEISH.search(response)
        and not clarification_hit
        and not answered
        and len(remainder) < 300
        and generic_hit
    ):
        meaningful = False
    nothing_new = content.fresh_words == 0 and content.fresh_hanzi == 0
    if not meaningful and (generic_hit or (nothing_new and content.words + content.hanzi >= 6)):
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
    needs_input = c.response_type == "clarification" and asks_for_missing_input(response, prompt)
    retry = c.should_retry(complex_) and not needs_input
    reasons = list(c.reasons)
    if needs_input:
        reasons.append(
            "the prompt points at material it does not contain, so asking for it is right"
        )
    elif c.response_type == "clarification":
        reasons.append(
            "the prompt is a concrete task, so a question alone is not an answer"
            if complex_
            else "the prompt is vague, so asking what is wanted is the right answer"
        )
    return AnswerAssessment(c, complex_, retry, reasons)


def continue_prompt(prompt: str) -> str:
    return "继续" if is_chinese(prompt) else "Please continue and complete the task."
