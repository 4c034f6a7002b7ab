"""Phrase families the rule judge looks for, English and Chinese, kept as data.

Patterns are regular expressions matched case-insensitively against the final output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The final output says part of the work is still to do.
REMAINING_WORK: tuple[str, ...] = (
    r"\bremaining steps?\b",
    r"\bstill (?:need|needs|have|has) to\b",
    r"\bstill to be done\b",
    r"\bnot (?:yet )?(?:been )?(?:completed|finished|done)\b",
    r"\bhave(?:n't| not) (?:yet )?(?:completed|finished|done)\b",
    r"\b(?:next|remaining) (?:steps?|tasks?) (?:are|is|would be|will be)\b",
    r"\bto ?do:",
    r"\bpending:",
    r"\bI will (?:now |next )?(?:continue|proceed) (?:with|to)\b",
    r"剩余步骤",
    r"剩下的步骤",
    r"尚未",
    r"还需要",
    r"还没有?完成",
    r"未完成",
    r"待完成",
    r"接下来(?:需要|还要|将)",
)


def compile_family(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE | re.MULTILINE) for p in patterns)


REMAINING_WORK_RE = compile_family(REMAINING_WORK)


def first_match(text: str, family: tuple[re.Pattern[str], ...]) -> str | None:
    """The first matched snippet of `text` for a pattern family, if any."""
    for pattern in family:
        found = pattern.search(text)
        if found:
            return found.group(0).strip()
    return None
