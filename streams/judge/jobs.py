"""The judge stage's handler: a judge job in, a blended verdict published.

The same handler runs in the worker (when it judges: TRACEJUDGE_WORKER_JUDGES) and in
`tracejudge judge` (`judge/service.py`); both publish through `outputs.VerdictPublisher`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracejudge.judges.verdict.conclude import JudgeJob, JudgeOutcome
from tracejudge.judges.verdict.encoded import made_of
from tracejudge.streams.judge.stage import JudgeStage
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import VerdictPublisher


def record_outcome(metrics: Metrics, outcome: JudgeOutcome) -> None:
    """A judge call in the metrics: a cache hit, or the model's latency and any error."""
    if outcome.cached:
        metrics.judge_cache_hits.inc()
    if outcome.error is not None:
        metrics.judge_errors.labels(outcome.error).inc()
    if outcome.latency_s is not None:
        metrics.judge_latency.observe(outcome.latency_s)
    if outcome.budget_spent is not None:
        metrics.judge_budget_skips.labels(outcome.budget_spent).inc()
    if outcome.expired:
        metrics.judge_expired.inc()
    call = outcome.call
    if call is None or call.cached:
        return
    model = call.requested_model
    metrics.judge_attempts.labels(model).inc(call.attempts)
    for kind, count in (
        ("input", call.input_tokens),
        ("cached_input", call.cached_input_tokens),
        ("output", call.output_tokens),
    ):
        if count:
            metrics.judge_tokens.labels(model, kind).inc(count)
    if call.cost_usd:
        metrics.judge_cost.labels(model).inc(call.cost_usd)


@dataclass
class JudgeJobHandler:
    stage: JudgeStage
    publisher: VerdictPublisher
    metrics: Metrics

    @property
    def breaker_open(self) -> bool:
        return self.stage.breaker.state == "open"

    @property
    def rate_limit_waits(self) -> int:
        return self.stage.limiter.waits

    async def __call__(self, record: InRecord) -> None:
        """Judge the job in `record`; a malformed one raises the validation error and is
        dead-lettered like any bad record."""
        job = JudgeJob.model_validate_json(record.value or b"")
        verdict, outcome = await self.stage.judged(job)
        record_outcome(self.metrics, outcome)
        # the time to a first verdict was measured when the pending one went out
        terminal_at = None if job.pending_published else job.terminal_at
        await self.publisher.publish(
            made_of(verdict, job.timeline, job.timeline_not_kept, job.rules), terminal_at
        )

    async def aclose(self) -> None:
        await self.stage.aclose()
