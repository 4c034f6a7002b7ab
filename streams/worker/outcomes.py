"""Where the window agent hands outcome events: never to a window, always to an `OutcomeTaker`.

An outcome (ground truth about a request, `models.events.Outcome`) arrives minutes to days
after the request's verdict, so it cannot be part of the request's window: it would reopen a
closed one, or open one for a request long purged. The event handler routes it here instead,
saying whether its window store knows the request (`WindowStore.known`). The agreement store
(`streams/agreement/`) implements the taker that joins outcomes to verdicts; `CountingOutcomes`
is what runs without it: it counts, and keeps nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tracejudge.models.events import Outcome
from tracejudge.streams.shared.metrics import Metrics


class OutcomeTaker(Protocol):
    async def take(self, event: Outcome, known: bool) -> str:
        """Handle one validated outcome; the result as counted (e.g. joined, same, replaced,
        early, unmatched). `known`: the worker's window store has seen the request (its window
        is open, or closed within TRACEJUDGE_CLOSED_RETENTION_S). Raising dead-letters the
        record (the error policy); a Kafka error makes the worker exit, as for any event."""
        ...


@dataclass
class CountingOutcomes:
    """The taker without an agreement store: each outcome is counted (in /health's tallies,
    `outcomes_received`, and `outcomes_unknown` for a request this worker never saw)."""

    metrics: Metrics = field(default_factory=Metrics)

    async def take(self, event: Outcome, known: bool) -> str:
        self.metrics.counts["outcomes_received"] += 1
        if not known:
            self.metrics.counts["outcomes_unknown"] += 1
        return "received"
