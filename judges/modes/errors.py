"""A tool's error as a template: the line that says what went wrong, its variable parts folded
(numbers, ids, hashes, paths, dates and times, quoted values, addresses), so that the same
failure with other ids is the same template. The masking step of a streaming template miner
(drain3's), done once per error, in time linear in its length: every pattern is a run of one
character class, none can backtrack."""

from __future__ import annotations

import re

MAX_CHARS = 2_000  # of an error read; its gist is in its first or last lines
TEMPLATE_CHARS = 160

_TRACEBACK = "Traceback (most recent call last)"
# the line a Python traceback ends with: `SomethingError: message` (or Exception, Warning)
_RAISED = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt)\b.*$")
_FRAME = re.compile(r'\s+File "[^"\n]{0,1000}", line \d+')
_FOLDS = (
    (
        "<TIME>",
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
        ),
    ),
    ("<DATE>", re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b")),
    ("<TIME>", re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?\b")),
    ("<URL>", re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.IGNORECASE)),
    ("<EMAIL>", re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")),
    (
        "<UUID>",
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
    ),
    ("<HEX>", re.compile(r"\b(?:0x)?[0-9a-f]{8,}\b", re.IGNORECASE)),
    ("<PATH>", re.compile(r"(?:[A-Za-z]:\\|\.{0,2}/)[\w.\-/\\~]*[\w/\\]|\b[\w.-]+/[\w.\-/]*")),
    ("<STR>", re.compile(r"'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"|`[^`\n]{0,200}`")),
    ("<ID>", re.compile(r"\b(?=[A-Za-z_-]*\d)(?=\w*[A-Za-z])[A-Za-z0-9_-]{3,}\b")),
    ("<N>", re.compile(r"[-+]?\b\d+(?:[.,]\d+)*")),  # a unit after it stays: "<N>s"
)
# an HTTP status says which failure it is: kept, not folded into <N>
_KEPT = re.compile(r"\b(?:HTTP|status(?: code)?|code)[ :=]+[1-5]\d{2}\b", re.IGNORECASE)
_SPACES = re.compile(r"\s+")
_SAME = re.compile(r"(<[A-Z]+>)(?:[\s,;]*\1)+")  # "<N>, <N>, <N>": one


def gist(text: str) -> str:
    """The line of an error that says what went wrong: the last raised exception's line (a
    traceback's end, or an executor's output under its exit code), else the first line."""
    text = text[:MAX_CHARS] if _TRACEBACK not in text else text[-MAX_CHARS:]
    raw = text.splitlines()
    lines = [line.strip() for line in raw if line.strip()]
    if not lines:
        return ""
    raised = _after_frames(raw)
    if raised:
        return raised
    for line in reversed(lines):
        if _RAISED.match(line):
            return line
    return lines[0]


def _after_frames(lines: list[str]) -> str | None:
    """A Python traceback's exception line: the first line at the margin after its last frame
    (`  File "...", line N`), whatever the exception's class is called (UniqueViolation,
    StopIteration, a library's own); a frame's code and carets are indented, the exception is
    not. None when there is no frame (or nothing after it)."""
    last = None
    for at, line in enumerate(lines):
        if _FRAME.match(line):
            last = at
    if last is None:
        return None
    for line in lines[last + 1 :]:
        if line.strip() and not line[0].isspace():
            return line.strip()
    return None


def _folded(text: str) -> str:
    for mark, pattern in _FOLDS:
        text = pattern.sub(mark, text)
    return text


def template(text: str | None) -> str | None:
    """The error's template (None for no error)."""
    if not text or not text.strip():
        return None
    line = gist(text)
    parts, at = [], 0
    for kept in _KEPT.finditer(line):
        parts += [_folded(line[at : kept.start()]), kept.group(0)]
        at = kept.end()
    line = "".join([*parts, _folded(line[at:])])
    line = _SAME.sub(r"\1", _SPACES.sub(" ", line)).strip()
    return line[:TEMPLATE_CHARS] or None
