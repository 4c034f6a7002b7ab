"""`tracejudge publish FILE`: every line checked against the event contract before any is sent.

A person publishing a file wants to know which lines the worker would dead-letter, before they
are sent, rather than "sent 6 events" and a dead-letter topic to read. Bad lines are reported by
number and reason and, by default, nothing is sent (`--skip-invalid` sends the good ones and
names the skipped). Fields the contract does not know are named but not refused: the worker
ignores them (producers add their own), and a misnamed required field is refused anyway.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, get_args

from pydantic import BaseModel

from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import Event, decode_object, parse_event

MAX_REPORTED = 20  # problem lines printed; the rest are counted
# event type -> its model, read from the contract's union (`Event` is Annotated[A | B | ...,
# discriminator]) and each model's `type` literal: a new event type needs no edit here
MODELS: dict[str, type[BaseModel]] = {
    get_args(model.model_fields["type"].annotation)[0]: model
    for model in get_args(get_args(Event)[0])
}


@dataclass(frozen=True)
class LineProblem:
    line: int  # 1-based, as an editor numbers them
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class CheckedLines:
    good: list[bytes] = field(default_factory=list)
    good_numbers: list[int] = field(default_factory=list)
    bad: list[LineProblem] = field(default_factory=list)
    warnings: list[LineProblem] = field(default_factory=list)
    blank: int = 0


def check_lines(lines: Iterable[bytes], max_bytes: int | None = None) -> CheckedLines:
    """Each non-blank line parsed as the worker parses it (models.events.parse_event)."""
    checked = CheckedLines()
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            checked.blank += 1
            continue
        value: dict[str, Any] = {}
        try:
            value = decode_object(line, max_bytes)  # decoded once, then validated as a dict
            event = parse_event(value)
        except InvalidEvent as exc:
            reason = f"{exc.code}: {exc.reason}"
            unknown = _unknown(value)
            if unknown:
                reason += f" (unknown {_plural('field', unknown)}: {', '.join(unknown)})"
            checked.bad.append(LineProblem(number, reason))
            continue
        unknown = _unknown(value)
        if unknown:
            checked.warnings.append(
                LineProblem(
                    number,
                    f"{event.type}: unknown {_plural('field', unknown)} "
                    f"{', '.join(unknown)}, ignored by the worker",
                )
            )
        checked.good.append(line)
        checked.good_numbers.append(number)
    return checked


def _unknown(value: dict[str, Any]) -> list[str]:
    """The fields of a decoded line that its event type does not have ([] for an unknown
    type, or a line that did not decode)."""
    model = MODELS.get(str(value.get("type")))
    return sorted(set(value) - set(model.model_fields)) if model is not None else []


def _plural(word: str, items: list[str]) -> str:
    return word if len(items) == 1 else word + "s"


def report(problems: list[LineProblem], limit: int = MAX_REPORTED) -> list[str]:
    """One line per problem, at most `limit`, then how many more."""
    lines = [f"tracejudge: {p}" for p in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"tracejudge: ... and {len(problems) - limit} more")
    return lines


def line_ranges(numbers: list[int]) -> str:
    """[2, 3, 4, 7] -> "2-4, 7": every skipped line named, however many."""
    parts: list[str] = []
    start = prev = None
    for n in [*sorted(numbers), None]:
        if start is not None and (n is None or n != prev + 1):  # type: ignore[operator]
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if n is not None and start is None:
            start = n
        prev = n
    return ", ".join(parts)
