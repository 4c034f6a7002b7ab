"""Which parts of a text are prose, and which are an artifact: a patch, code, a log, JSON.

The claim rules (an announced action, an admitted failure, work said to remain, filler) read
what an agent *says*. A patch or a code block is what it *made*: "# TODO: I could not find the
issue number" inside a diff is a line of code, not an admission, and a log line "ERROR: could
not connect" is a tool's output, not the agent's claim. `split` keeps the prose for the rules
and says whether an artifact was there at all (an answer that is only a patch is not empty).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

_FENCE = re.compile(r"^\s*(```|~~~)")
_DIFF_START = re.compile(r"^(?:diff --git |--- (?:a/|/dev/null)|\+\+\+ (?:b/|/dev/null)|@@ -\d)")
# inside a diff: headers, hunks, context and changed lines
_DIFF_LINE = re.compile(
    r"^(?:[ +\-\\]|@@|diff --git|index [0-9a-f]|new file mode|deleted file mode|old mode|"
    r"new mode|similarity index|rename (?:from|to)|Binary files|$)"
)
_LOG_LINE = re.compile(
    r"^\s*(?:\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\[?\d\d:\d\d:\d\d[.,\]]|"
    r"(?:TRACE|DEBUG|INFO|WARN(?:ING)?|ERROR|FATAL|CRITICAL)\b[:\] ]|\[(?:TRACE|DEBUG|INFO|WARN"
    r"(?:ING)?|ERROR|FATAL)\]|Traceback \(most recent call last\)|File \"[^\"]+\", line \d+|"
    r"at [\w$.]+\([\w$.]*(?::\d+)?\)|Caused by: |\$ |>>> |[\w.]*(?:Error|Exception): )"
)
_CODE_LINE = re.compile(
    r"^\s*(?:(?:import|from \S+ import|package|def|class|public|private|protected|static|return|"
    r"function|const|let|var|#include|using|namespace|fn|func|pub)\b.*|.*[;{}]\s*$|//.*|/\*.*|"
    r"\*/|@\w+(?:\(.*\))?\s*$)"
)


@dataclass(frozen=True)
class Split:
    prose: str
    artifact: bool  # a patch, code block, log or JSON was there


@lru_cache(maxsize=256)
def split(text: str) -> Split:
    """The prose of a text, without its patches, code blocks, logs and JSON. Cached: several
    rules read the same final answer."""
    stripped = text.strip()
    if stripped[:1] in "{[" and _is_json(stripped):
        return Split("", True)
    kept: list[str] = []
    artifact = False
    fenced = in_diff = False
    lines = text.splitlines()
    code_run: list[str] = []

    def end_code_run() -> None:
        # two or more code-like lines in a row are code; a single one may be prose ("Done;")
        nonlocal artifact
        if len(code_run) >= 2:
            artifact = True
        else:
            kept.extend(code_run)
        code_run.clear()

    for line in lines:
        if _FENCE.match(line):
            fenced = not fenced
            artifact = True
            continue
        if fenced:
            continue
        if in_diff and _DIFF_LINE.match(line):
            continue
        in_diff = False
        if _DIFF_START.match(line):
            in_diff = artifact = True
            continue
        if _LOG_LINE.match(line):
            artifact = True
            continue
        if _CODE_LINE.match(line):
            code_run.append(line)
            continue
        end_code_run()
        kept.append(line)
    end_code_run()
    return Split("\n".join(kept).strip(), artifact)


def prose(text: str) -> str:
    return split(text).prose


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # nested past the parser's depth: not an artifact
        return False
    return True
