"""Early-stop decisions for iterative workflows, taken as each `iteration` event arrives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tracejudge.judges.inflight.early_stop import EarlyStopPolicy, check_early_stop
from tracejudge.judges.masking.redact import mask
from tracejudge.judges.verdict.conclude import stable_id
from tracejudge.judges.verdict.encoded import encode
from tracejudge.models.names import REDIS_CONTROL_KEY
from tracejudge.models.outputs import EarlyStopDecision
from tracejudge.models.signing import ControlKeys, signed
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import Channel, Lookup, deliver
from tracejudge.streams.worker.windows import WindowStore


@dataclass
class EarlyStopper:
    store: WindowStore
    policy: EarlyStopPolicy
    control: Channel
    lookup: Lookup
    clock: Callable[[], float]
    metrics: Metrics = field(default_factory=Metrics)
    keys: ControlKeys | None = None  # what signs the decisions; None: unsigned

    async def check(self, request_id: str, run_nonce: str | None = None) -> None:
        """Publish a decision if the rounds so far call for one not yet published.
        `run_nonce`: the run's (its events'), signed into the decision."""
        rounds = self.store.rounds(request_id)  # kept as they arrived: no decoding here
        found = check_early_stop(rounds, self.policy, self.store.early_actions(request_id))
        if found is None:
            return
        decision = EarlyStopDecision(
            decision_id=stable_id("early_stop", request_id, str(found.iteration), found.action),
            request_id=request_id,
            iteration=found.iteration,
            action=found.action,
            reason=found.reason,
            evidence=mask(found.evidence),  # the round's own text: masked as it leaves
            ts=self.clock(),
            run_nonce=run_nonce,
        )
        record = signed(encode(decision), self.keys)
        await deliver(self.control, request_id.encode("utf-8"), record)
        await self.lookup.put_at(REDIS_CONTROL_KEY.format(request_id=request_id), record)
        # recorded after delivery: a crash in between re-sends the same decision_id
        self.store.record_early(request_id, found.action, found.iteration)
        self.metrics.counts[f"early_{found.action}"] += 1
        self.metrics.early_stops.labels(found.action).inc()
        self.metrics.control_records.labels("none" if self.keys is None else self.keys.scheme).inc()
