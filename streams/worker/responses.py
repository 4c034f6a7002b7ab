"""The responses agent's handler: a model answer in, a retry request (or an alert) out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from tracejudge.judges.agreement.action_effects import Amounts, retry_answered, retry_asked
from tracejudge.judges.verdict.encoded import encode
from tracejudge.judges.verdict.retries import RetryPlan, plan_retry
from tracejudge.models.responses import ModelResponse, parse_model_response
from tracejudge.streams.agreement.store import AgreementStore, AgreementUnavailable
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import Channel

# Fingerprints of handled answers kept per session: enough to recognise redeliveries.
MARKS_KEPT = 32


@dataclass
class ResponseHandler:
    marks: MutableMapping[str, Any]  # session_id -> {"marks": [fingerprint, ...]}
    retries: Channel
    alerts: Channel
    max_retries: int
    clock: Callable[[], float]
    max_event_bytes: int | None = None
    judging: bool = True  # TRACEJUDGE_ENABLED=false: answers are parsed and counted, no more
    metrics: Metrics = field(default_factory=Metrics)
    # where the generic-retry figures are counted (judges/agreement/action_effects.py); None:
    # not counted
    actions: AgreementStore | None = None

    async def __call__(self, record: InRecord) -> None:
        response = parse_model_response(record.value, self.max_event_bytes)
        if not self.judging:
            self.metrics.counts["responses_counted"] += 1
            self.metrics.responses.labels("counted").inc()
            return
        plan = plan_retry(response, self.max_retries, self.clock())
        marks: list[str] = (self.marks.get(response.session_id) or {}).get("marks", [])
        if plan.fingerprint in marks:  # a redelivered answer: it was handled already
            # written again so that the changelog holds it even if the first write only
            # reached the local store before a crash (see WindowStore.add)
            self.marks[response.session_id] = {"marks": marks}
            self.metrics.counts["responses_duplicate"] += 1
            self.metrics.responses.labels("duplicate").inc()
            return
        key = response.session_id.encode("utf-8")
        pending = []
        if plan.retry is not None:
            pending.append(await self.retries.send(key=key, value=encode(plan.retry)))
            self.metrics.counts[plan.retry.type] += 1
            self.metrics.retries.labels(plan.retry.type).inc()
        if plan.alert is not None:
            pending.append(await self.alerts.send(key=key, value=encode(plan.alert)))
        await asyncio.gather(*pending)
        await self._count(response, plan)
        # written after delivery: a crash in between re-sends the same retry_id, never loses it
        self.marks[response.session_id] = {"marks": [*marks, plan.fingerprint][-MARKS_KEPT:]}
        self.metrics.counts["responses"] += 1
        self.metrics.responses.labels("handled").inc()

    async def _count(self, response: ModelResponse, plan: RetryPlan) -> None:
        """The generic-retry figures: a retry asked, an answer given to one (fixed when no
        retry follows it). Keyed by the answer's fingerprint: a redelivery counts once."""
        amounts: Amounts = []
        if plan.retry is not None and plan.retry.type == "retry_request":
            amounts += retry_asked(response.agent)
        if response.attempt >= 1:
            amounts += retry_answered(response.agent, substantive=plan.retry is None)
        if self.actions is None or not amounts:
            return
        with contextlib.suppress(AgreementUnavailable):  # counted and logged by the store
            await self.actions.count_action("answer", plan.fingerprint, self.clock(), amounts)
