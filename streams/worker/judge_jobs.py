"""The judge stage's handler: a judge job in, a blended verdict published.

Where the judge call runs is a `Judge`: in this process (`InlineJudge`: replay, tests) or in a
process of its own (`judge_process.py`: the worker), so that the HTTP calls, the cache and the
verdict's masking and encoding take nothing from the window agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from tracejudge.judges.verdicts import JudgeJob, JudgeOutcome
from tracejudge.streams.judging.stage import JudgeStage
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.metrics import Metrics
from tracejudge.streams.worker.verdict_making import Made, made_of


@dataclass(frozen=True)
class Judged:
    """A judged verdict, encoded, and what the worker's metrics need to know of the call."""

    made: Made
    outcome: JudgeOutcome  # without the answer: it is in `made`
    terminal_at: float | None  # the job's, for the verdict latency
    breaker_open: bool
    rate_limit_waits: int


class Judge(Protocol):
    async def __call__(self, raw: bytes) -> Judged:
        """Judge the job encoded in `raw` (a record's value); a malformed one raises the
        validation error, and is dead-lettered like any bad record."""
        ...

    async def aclose(self) -> None: ...


class InlineJudge:
    def __init__(self, stage: JudgeStage) -> None:
        self.stage = stage

    async def __call__(self, raw: bytes) -> Judged:
        return await judge_with(self.stage, raw)

    async def aclose(self) -> None:
        await self.stage.aclose()


async def judge_with(stage: JudgeStage, raw: bytes) -> Judged:
    job = JudgeJob.model_validate_json(raw)
    verdict, outcome = await stage.judged(job)
    return Judged(
        made_of(verdict),
        replace(outcome, answer=None),
        job.terminal_at,
        stage.breaker.state == "open",
        stage.limiter.waits,
    )


def record_outcome(metrics: Metrics, outcome: JudgeOutcome) -> None:
    """A judge call in the metrics: a cache hit, or the model's latency and any error."""
    if outcome.cached:
        metrics.judge_cache_hits.inc()
    if outcome.error is not None:
        metrics.judge_errors.labels(outcome.error).inc()
    if outcome.latency_s is not None:
        metrics.judge_latency.observe(outcome.latency_s)


@dataclass
class JudgeJobHandler:
    judge: Judge
    publish: Callable[[Made, float | None], Awaitable[None]]
    metrics: Metrics
    # as of the last call, for /metrics
    breaker_open: bool = False
    rate_limit_waits: int = 0

    async def __call__(self, record: InRecord) -> None:
        judged = await self.judge(record.value or b"")
        record_outcome(self.metrics, judged.outcome)
        self.breaker_open, self.rate_limit_waits = judged.breaker_open, judged.rate_limit_waits
        await self.publish(judged.made, judged.terminal_at)
