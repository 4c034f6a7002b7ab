"""What privacy tests look for in an output: pieces of a secret in any of its strings."""

from __future__ import annotations

import re
from typing import Any

MASK = re.compile(r"\[REDACTED:\w+\]")


def text_of(found: Any) -> str:
    """Every string in `found` (dicts and lists walked), joined by NULs, masks taken out:
    `[REDACTED:github_token]` holds `github`, which is no leak."""
    strings: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            strings.append(MASK.sub("\x00", value))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(found)
    return "\x00".join(strings)


def pieces(raw: str, length: int) -> set[str]:
    """Every piece of `raw` `length` characters long."""
    return {raw[i : i + length] for i in range(len(raw) - length + 1)}
