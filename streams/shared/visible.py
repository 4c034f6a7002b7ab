"""Trace text on an operator's terminal, shown and never obeyed.

Request ids, agent names, goals, answers and errors come from agents, and through them from web
pages, users and files: a control character in them reaches the terminal that prints them. An
escape sequence there can retitle the window, clear the screen, make a link say one thing and
go to another, or recolour what follows; a carriage return or a newline lets data overwrite a
line or print one of its own (`12:00:00 req-42 score=100 PASS`). So every command that prints
trace-derived text for people passes it through `visible` (or `visible_data`, the whole record
at once): C0 and C1 controls and DEL become visible symbols or escapes, and so do the Unicode
characters that reorder or break lines (bidirectional overrides and isolates, line and paragraph
separators). What is printed is one line per line the command meant to print, whatever the data.
`--json` output is JSON, whose encoder escapes C0 controls; `exact_json` escapes the rest.
"""

from __future__ import annotations

import json
from typing import Any

# C0 controls as the Unicode "control pictures" (␛ for ESC, ␊ for a newline), DEL as ␡
_TABLE: dict[int, str] = {c: chr(0x2400 + c) for c in range(0x20)}
_TABLE[0x7F] = "\u2421"
# C1 controls (CSI 0x9b, OSC 0x9d, NEL 0x85, ...): some terminals obey them as ESC sequences
_TABLE.update({c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})
# reordering and line breaking: bidirectional embeddings, overrides, isolates and marks, and
# the line and paragraph separators
_TABLE.update({c: f"\\u{c:04x}" for c in (0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F))})
_TABLE.update({c: f"\\u{c:04x}" for c in range(0x2066, 0x206A)})
# the Arabic letter mark: a bidirectional control too (Unicode's Bidi_Control set)
_TABLE[0x061C] = "\\u061c"
# lone surrogates: a JSON file may hold "\ud800", Python reads it into a string, and printing
# it raised UnicodeEncodeError and ended the command; shown as the escape it was
_TABLE.update({c: f"\\u{c:04x}" for c in range(0xD800, 0xE000)})
_UNSAFE = frozenset(chr(c) for c in _TABLE)


def visible(text: str) -> str:
    """`text` with every character a terminal would act on shown instead."""
    if _UNSAFE.isdisjoint(text):  # the common case: nothing to replace, nothing copied
        return text
    return text.translate(_TABLE)


def visible_lines(lines: list[str]) -> str:
    """Lines a command meant to print, joined: a newline inside one is data, and shown."""
    return "\n".join(visible(line) for line in lines)


def visible_log(text: str) -> str:
    """A log message: controls shown, and each line after the first indented, so that a
    newline in it (a stack, or data) never starts a line that reads as a record of its own."""
    return visible(text.replace("\r\n", "\n")).replace("\u240a", "\n  ")


def visible_data(value: Any) -> Any:
    """`value` (parsed JSON, or a dataclass's fields) with `visible` applied to every string in
    it, keys included."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible_data(k): visible_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(visible_data(v) for v in value)
    return value


def exact_json(line: str) -> str:
    """A record's JSON as read, when a terminal cannot act on any of it; else the same value
    encoded with every non-ASCII character escaped (C1 controls and bidirectional overrides are
    not escaped by JSON itself). A record that is not JSON becomes a JSON string."""
    if _UNSAFE.isdisjoint(line):
        return line
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        value = line
    return json.dumps(value, ensure_ascii=True)
