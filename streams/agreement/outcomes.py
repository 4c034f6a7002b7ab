"""The worker's outcome taker with an agreement store: each outcome event is joined to its
request's verdict (`store.outcome`) and counted by result in `tracejudge_outcomes_total`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tracejudge.judges.agreement.tally import Truth
from tracejudge.models.events import Outcome
from tracejudge.models.sessions import session_ref
from tracejudge.streams.agreement.store import AgreementStore, AgreementUnavailable
from tracejudge.streams.shared.metrics import Metrics


@dataclass
class AgreementOutcomes:
    store: AgreementStore
    metrics: Metrics
    clock: Callable[[], float] = time.time

    async def take(self, event: Outcome, known: bool) -> str:
        """joined, same, replaced, early (no verdict kept yet), unmatched (no verdict kept and
        the worker does not know the request: never seen, or seen beyond its retention; kept
        as early all the same, should its verdict still come)."""
        now = self.clock()
        # the outcome's own time picks its day bucket (the same on a redelivery); never one
        # ahead of this clock, whose tally reads would not reach it
        at = now if event.ts is None else min(event.ts, now)
        truth = Truth(event.counted_ok, event.source)
        target = event.request_id
        if event.subject == "session" and event.session_key:  # its session's final verdict
            target = session_ref(event.agent_name, event.session_key)
        try:
            result: str = await self.store.outcome(target, truth, at)
        except AgreementUnavailable:
            # dead-lettered with the reason (the error policy): the outcome is kept there, to
            # be published again, rather than dropped while Redis is away
            self._count("failed")
            raise
        if result == "early" and not known and event.subject == "request":
            result = "unmatched"
        self._count(result)
        return result

    def _count(self, result: str) -> None:
        self.metrics.outcomes.labels(result).inc()
        self.metrics.counts[f"outcomes_{result}"] += 1
