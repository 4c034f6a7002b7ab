"""Which steps of a request's timeline a verdict's findings concern, for marking them.

A failed step names its step index. A finding names its rule and the (masked) text it read: it is
placed on every step whose (equally masked) text holds a piece of that evidence, a finding about
the answer on the final response, a team's check's on the step it names; one that concerns no
single step (a planned step never attempted, the run as a whole) stays with the request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PIECE_CHARS = 40  # enough of a piece of evidence to find it, short enough to survive clipping
MIN_PIECE = 4
MAX_PLACES = 5  # a finding found everywhere says nothing about where
ANSWER_RULES = ("placeholder_answer", "says_work_remains", "claim_without_call")
TEXT_FIELDS = ("text", "result", "error", "tool")


@dataclass
class Marks:
    by_entry: dict[int, list[str]] = field(default_factory=dict)  # timeline index -> marks
    request_wide: list[dict[str, Any]] = field(default_factory=list)  # findings placed nowhere
    blamed: int | None = None  # timeline index of the step the verdict blames

    def add(self, index: int, mark: str) -> None:
        marks = self.by_entry.setdefault(index, [])
        if mark not in marks:
            marks.append(mark)


def _flat(text: Any) -> str:
    return " ".join(str(text).split()).lower()


def _pieces(evidence: str) -> list[str]:
    parts = re.split(r";\s+|,\s+|\s+\|\s+", evidence)
    pieces = [_flat(p).strip(" .…'\"")[:PIECE_CHARS] for p in parts]
    return [p for p in pieces if len(p) >= MIN_PIECE]


def locate(evaluation: dict[str, Any], timeline: list[dict[str, Any]]) -> Marks:
    marks = Marks()
    blame = evaluation.get("blame") or {}
    if blame.get("step_index") is not None:
        at = [
            i
            for i, e in enumerate(timeline)
            if e.get("step") == blame["step_index"] and e.get("type") != "task_started"
        ]
        if not at and blame["step_index"] > max((e.get("step") or 0 for e in timeline), default=0):
            at = [i for i, e in enumerate(timeline) if e.get("type") == "final_response"]
        if at:
            marks.blamed = at[0]
            marks.add(at[0], "blamed")  # the reason is in the verdict's blame line
    texts = [" ".join(_flat(e[k]) for k in TEXT_FIELDS if e.get(k) is not None) for e in timeline]
    for failed in evaluation.get("failed_steps") or []:
        hits = [
            i
            for i, e in enumerate(timeline)
            if failed.get("index") is not None
            and e.get("step") == failed["index"]
            and e.get("type") != "task_started"
        ]
        for i in hits:
            marks.add(i, f"failed step: {failed.get('reason', '')}")
    final = [i for i, e in enumerate(timeline) if e.get("type") == "final_response"]
    for finding in evaluation.get("findings") or []:
        rule = str(finding.get("rule", ""))
        places: list[int] = []
        step = finding.get("step")  # a team's check that names the step it points at
        if step is not None:
            places = [
                i
                for i, e in enumerate(timeline)
                if e.get("step") == step and e.get("type") != "task_started"
            ]
        elif rule in ANSWER_RULES or rule.endswith("_answer"):
            places = final
        if not places:
            pieces = _pieces(str(finding.get("evidence", "")))
            places = [i for i, text in enumerate(texts) if any(p in text for p in pieces)]
        if 0 < len(places) <= MAX_PLACES:
            for i in places:
                marks.add(i, rule)
        else:
            marks.request_wide.append(finding)
    return marks
