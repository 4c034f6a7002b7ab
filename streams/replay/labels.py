"""Ground truth for `tracejudge agreement`: a labels file, and the outcome events of a recording.

A labels file is what a team already has: a JSON object `{request_id: label}` (the shared
sets' `labels.json`), or rows, one JSON object per line (or a JSON array of them), each with a
`request_id`. A label is `true`/`false`, a reward or score in 0-1 (ok at 0.5 or more), or an
object with `ok`, `success`, `reward` or `score`, and optionally a `source` (default "label").
A row with `"type": "outcome"` is read as the outcome event it is. A label that says none of
these is counted and shown, never guessed; a file that is not JSON at all is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracejudge.judges.agreement.tally import Truth, label_ok
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import OUTCOME_SOURCE, Outcome, parse_event

LABEL_SOURCE = "label"  # the source of a label that names none
_SOURCE = re.compile(OUTCOME_SOURCE)
_SHOWN = 5  # not-understood labels named in the report, the rest counted


class LabelsError(ValueError):
    """The labels file cannot be read as labels at all (one line for the user)."""


@dataclass(frozen=True)
class Labelled:
    """One outcome of one request, in the order given: a later one of the same request and
    source replaces an earlier one, as on the live worker."""

    request_id: str
    truth: Truth
    at: float = 0.0


@dataclass
class Labels:
    rows: list[Labelled] = field(default_factory=list)
    not_understood: int = 0
    examples: list[str] = field(default_factory=list)  # where and why, the first few

    def extend(self, other: Labels) -> None:
        self.rows += other.rows
        self.not_understood += other.not_understood
        self.examples = (self.examples + other.examples)[:_SHOWN]

    def refuse(self, where: str, why: str) -> None:
        self.not_understood += 1
        if len(self.examples) < _SHOWN:
            self.examples.append(f"{where}: {why}")


def ok_of(value: Any) -> bool | None:
    """`label_ok`, and an outcome's shape: `ok` may be null where a `score` (0-1) says it."""
    found = label_ok(value)
    if found is None and isinstance(value, Mapping):
        for key in ("ok", "success", "reward", "score"):
            if value.get(key) is not None:
                return label_ok(value[key])
    return found


def _row(labels: Labels, where: str, rid: Any, value: Any) -> None:
    if not isinstance(rid, str) or not rid:
        labels.refuse(where, "no request_id")
        return
    if isinstance(value, Mapping) and value.get("type") == "outcome":
        try:
            event = parse_event(dict(value))
        except InvalidEvent as exc:
            labels.refuse(where, f"not a valid outcome ({exc.reason[:120]})")
            return
        assert isinstance(event, Outcome)
        labels.rows.append(Labelled(rid, Truth(event.counted_ok, event.source), event.ts or 0.0))
        return
    ok = ok_of(value)
    if ok is None:
        labels.refuse(where, "neither true/false, a 0-1 reward, nor ok/success/reward/score")
        return
    source = value.get("source", LABEL_SOURCE) if isinstance(value, Mapping) else LABEL_SOURCE
    if not isinstance(source, str) or not _SOURCE.match(source):
        labels.refuse(where, f"source {source!r:.40} is not a short lowercase token")
        return
    at = value.get("ts") if isinstance(value, Mapping) else None
    at = float(at) if isinstance(at, int | float) and not isinstance(at, bool) else 0.0
    labels.rows.append(Labelled(rid, Truth(ok, source), at))


def _is_row(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("request_id"), str)


def read_labels(path: Path) -> Labels:
    """The labels in `path`; LabelsError when it cannot be read as labels at all."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LabelsError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise LabelsError(f"{path} is not UTF-8 text") from None
    labels = Labels()
    try:
        whole: Any = json.loads(text)
    except json.JSONDecodeError:
        whole = _lines(path, text)
    if isinstance(whole, Mapping) and not _is_row(whole):  # {request_id: label}
        for rid, value in whole.items():
            _row(labels, repr(rid)[:60], rid, value)
    elif isinstance(whole, Mapping | list):  # one row, or rows
        for n, row in enumerate([whole] if isinstance(whole, Mapping) else whole, start=1):
            rid = row.get("request_id") if isinstance(row, Mapping) else None
            _row(labels, f"row {n}", rid, row)
    else:
        raise LabelsError(f"{path}: not labels (a JSON object, or rows with a request_id)")
    if not labels.rows and not labels.not_understood:
        raise LabelsError(f"{path}: no labels in it")
    return labels


def _lines(path: Path, text: str) -> list[Any]:
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise LabelsError(f"{path}:{n}: not JSON ({exc.msg})") from None
    return rows


def outcomes_in(records: Iterable[tuple[bytes | None, bytes]]) -> Labels:
    """The outcome events of a recording, in the order they come (invalid ones counted: the
    replay dead-letters them, as the worker would)."""
    labels = Labels()
    for n, (_, value) in enumerate(records, start=1):
        if b"outcome" not in value:  # most lines are steps: skip them before parsing
            continue
        try:
            event = parse_event(value)
        except InvalidEvent as exc:
            if _type(value) == "outcome":
                labels.refuse(f"event {n}", f"not a valid outcome ({exc.reason[:120]})")
            continue
        if isinstance(event, Outcome):
            truth = Truth(event.counted_ok, event.source)
            labels.rows.append(Labelled(event.request_id, truth, event.ts or 0.0))
    return labels


def _type(value: bytes) -> Any:
    try:
        found = json.loads(value)
    except ValueError:
        return None
    return found.get("type") if isinstance(found, dict) else None
