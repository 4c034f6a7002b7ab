"""What a check returns: nothing when the run passes, else a `Failure` (or several)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# fail: the run fails (not passed, its score capped below the threshold); lower: its score goes
# down, the verdict stands; note: shown and counted, nothing changes
Severity = Literal["fail", "lower", "note"]
SEVERITIES: tuple[Severity, ...] = ("fail", "lower", "note")


@dataclass(frozen=True)
class Failure:
    """A check's finding: `message` in words; `step`: the index of the step it points at (a
    `StepView.index`); `severity`: fail (default), lower or note."""

    message: str
    step: int | None = None
    severity: Severity = "fail"

    def __post_init__(self) -> None:
        if not isinstance(self.message, str) or not self.message.strip():
            raise ValueError("a check's Failure needs a message")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r}: one of {', '.join(SEVERITIES)}")
