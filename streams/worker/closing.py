"""Closing a window: the rule verdict at once, or a job for the LLM judge stage."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from tracejudge.judges.llm.prompt import build_input
from tracejudge.judges.rules import RuleJudge
from tracejudge.judges.sampling import sampled
from tracejudge.judges.verdicts import (
    DISABLED,
    SKIPPED,
    JudgeJob,
    Policy,
    WindowFacts,
    conclude,
)
from tracejudge.models.window import ClosedBy
from tracejudge.streams.worker.inflight import later
from tracejudge.streams.worker.outputs import Channel, VerdictPublisher, encode
from tracejudge.streams.worker.windows import WindowStore


@dataclass(frozen=True)
class LLMRouting:
    """Which closed requests go to the LLM judge, and how much of them it reads."""

    sample_rate: float
    max_input_chars: int


@dataclass
class WindowCloser:
    store: WindowStore
    rules: RuleJudge
    policy: Policy
    version: str
    publisher: VerdictPublisher
    judge_requests: Channel
    llm: LLMRouting | None  # None: the LLM judge is off
    counters: Counter[str]
    clock: Callable[[], float]

    async def close(
        self,
        request_id: str,
        closed_by: ClosedBy,
        terminal_at: float | None = None,
        offset: int | None = None,
    ) -> None:
        """Judge and close; `terminal_at` (the terminal event's broker timestamp) times the
        verdict, `offset` is the closing record's."""
        now = self.clock()
        window = self.store.collect(request_id, closed_by)
        verdict = self.rules.judge(window)
        facts = WindowFacts.of(window)
        if self.llm is not None and sampled(request_id, self.llm.sample_rate):
            # The judge runs in its own consumer: this agent goes on closing windows meanwhile.
            job = JudgeJob(
                facts=facts,
                rules=verdict,
                content=build_input(window, self.llm.max_input_chars).content,
                closed_at=now,
                terminal_at=terminal_at,
            )
            sent = await self.judge_requests.send(key=request_id.encode("utf-8"), value=encode(job))
            await later(sent)
            self.counters["judge_queued"] += 1
        else:
            outcome = SKIPPED if self.llm is not None else DISABLED
            await self.publisher.publish(
                conclude(facts, verdict, outcome, self.policy, self.version, now), terminal_at
            )
        # The marker goes now, the steps once the outputs are acknowledged: the closing record,
        # delivered again after a crash, finds them and publishes again (same evaluation_id).
        count = self.store.close(request_id, closed_by, now, offset)
        await later(self._forget(request_id, count))
        self.counters[f"closed_by_{closed_by}"] += 1
        self.publisher.metrics.windows_closed.labels(closed_by).inc()

    async def _forget(self, request_id: str, count: int) -> None:
        self.store.forget_steps(request_id, count)
