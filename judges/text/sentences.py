"""Where a sentence ends, for evidence and remaining steps quoted from an agent's answer.

A full stop ends a sentence only when space follows it ("$54.90", "3.11", "tests/test_api.py"
hold none) and the word before it is not an abbreviation ("Dr. Smith", "e.g. a refund", "No. 7")
or an initial ("J. Smith"); "。！？" end one with no space; a line break always does. Hand-written
rather than a library: the sentence splitters on PyPI either need a model downloaded at run
time (NLTK's punkt) or are unmaintained (pysbd), and what is quoted here needs only these cases,
in English and Chinese, at the cost of one regular-expression scan.
"""

from __future__ import annotations

import re

from tracejudge.judges.masking.clipping import quote_whole

# titles, Latin and business abbreviations and months: they take a full stop and are usually
# followed by more of the same sentence
# fmt: off
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "rev", "gen", "col", "capt", "lt",
    "sgt", "hon", "messrs", "mme", "mlle", "e.g", "i.e", "etc", "vs", "cf", "al", "approx", "ca",
    "viz", "dept", "inc", "ltd", "co", "corp", "llc", "plc", "bros", "jan", "feb", "mar", "apr",
    "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "a.m", "p.m", "u.s", "u.k", "u.n",
    "ph.d", "m.d", "b.a", "m.a",
})
# abbreviations only before a number ("No. 7", "p. 12"): "the answer is no. Then..." ends one
BEFORE_A_NUMBER = frozenset({"no", "nos", "nr", "vol", "p", "pp", "ch", "sec", "fig", "eq", "ref"})
# fmt: on
# a candidate end: terminal punctuation (and closing quotes or brackets) then space, a
# Chinese terminator, an ellipsis before Chinese text, or a line break. A run of marks is taken
# whole (possessive) and only from its first mark (the look-behind): a long run with no space
# after it ("........") was otherwise tried again from each of its marks, each time to its end.
_CANDIDATE = re.compile(
    r"(?<![.!?…])[.!?…]++[\"'”’)\]]*+(?=\s)|[。！？]+[”’」』）]*|(?<!…)…++(?=[\u3400-\u9fff])|\n"
)
_WORD_BEFORE = re.compile(r"([\w.]+)\.$")


def _ends_here(text: str, match: re.Match[str]) -> bool:
    mark = match.group(0)
    if mark == "\n" or not mark.startswith("."):
        return True
    word = _WORD_BEFORE.search(text, max(0, match.start() - 20), match.start() + 1)
    if word is None:
        return True
    before = word.group(1).lower()
    if before in ABBREVIATIONS:
        return False
    if before in BEFORE_A_NUMBER and re.match(r"\s*\d", text[match.end() : match.end() + 8]):
        return False
    # a single capital letter ("J. Smith") is an initial
    return not (len(before) == 1 and word.group(1).isupper())


def boundaries(text: str) -> list[int]:
    """Offsets just past each sentence end in `text`."""
    return [m.end() for m in _CANDIDATE.finditer(text) if _ends_here(text, m)]


def sentences(text: str) -> list[str]:
    """The sentences and lines of `text`, stripped, empty ones left out."""
    out, start = [], 0
    for end in [*boundaries(text), len(text)]:
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        start = end
    return out


def sentence_at(text: str, at: int, limit: int = 200) -> str:
    """The sentence of `text` holding offset `at`, stripped and clipped to `limit`."""
    start = 0
    for end in boundaries(text):
        if end > at:
            return quote_whole(text[start:end].strip(), limit)
        start = end
    return quote_whole(text[start:].strip(), limit)
