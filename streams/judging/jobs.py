"""The judge stage's handler: a judge job in, a blended verdict published."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tracejudge.judges.verdicts import JudgeJob, Verdict
from tracejudge.streams.judging.stage import JudgeStage
from tracejudge.streams.kafka.records import InRecord


@dataclass
class JudgeJobHandler:
    stage: JudgeStage
    publish: Callable[[Verdict, float | None], Awaitable[None]]

    async def __call__(self, record: InRecord) -> None:
        job = JudgeJob.model_validate_json(record.value or b"")
        await self.publish(await self.stage.judge(job), job.terminal_at)
