"""Consumes the judge-requests topic with calls in flight concurrently, committing safely.

Not a Faust agent on purpose: with several events in flight, Faust acknowledges offsets as a
set and can commit past one still being judged (faust-streaming #606; seen here with
`take_events` losing in-flight jobs across a kill -9). This loop uses its own aiokafka consumer
and commits, per partition, only the offset below the oldest job not yet finished, so a worker
killed mid-call loses nothing: every unfinished job is delivered again after restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from tracejudge.models import names
from tracejudge.streams.kafka.security import client_options
from tracejudge.streams.settings import Settings

log = logging.getLogger(__name__)

Handler = Callable[[ConsumerRecord], Awaitable[None]]

# Finished jobs are committed at most this often (and when partitions go or the loop stops),
# not after every finished job (a broker round trip per judged verdict); a crash judges at
# most this much again (under the same evaluation_id).
COMMIT_INTERVAL_S = 1.0


class OffsetTracker:
    """Per partition: offsets fetched and not finished; what is safe to commit."""

    def __init__(self) -> None:
        self.pending: dict[TopicPartition, set[int]] = {}
        self.next_offset: dict[TopicPartition, int] = {}
        self.committed: dict[TopicPartition, int] = {}

    def started(self, tp: TopicPartition, offset: int) -> None:
        self.pending.setdefault(tp, set()).add(offset)
        self.next_offset[tp] = max(self.next_offset.get(tp, 0), offset + 1)

    def finished(self, tp: TopicPartition, offset: int) -> None:
        self.pending.get(tp, set()).discard(offset)

    def safe(self) -> dict[TopicPartition, int]:
        """Offsets to commit now: below the oldest unfinished job, or after the last fetched."""
        out = {}
        for tp, nxt in self.next_offset.items():
            pending = self.pending.get(tp)
            offset = min(pending) if pending else nxt
            if offset > self.committed.get(tp, -1):
                out[tp] = offset
        return out

    def forget(self, tps: set[TopicPartition]) -> None:
        for tp in tps:
            self.pending.pop(tp, None)
            self.next_offset.pop(tp, None)
            self.committed.pop(tp, None)


class JudgeRunner:
    def __init__(self, settings: Settings, topic: str, handle: Handler) -> None:
        self.settings = settings
        self.topic = topic
        self.handle = handle
        self.max_in_flight = settings.llm_concurrency * 2  # keep the pipe full
        self.tracker = OffsetTracker()
        self.tasks: dict[asyncio.Task[None], tuple[TopicPartition, int]] = {}
        self.assigned = False
        self.last_commit = 0.0
        self.group_id = f"{settings.app_id}{names.JUDGE_GROUP_SUFFIX}"

    def _consumer(self) -> AIOKafkaConsumer:
        session_ms = int(self.settings.broker_session_timeout_s * 1000)
        return AIOKafkaConsumer(
            self.topic,
            **client_options(self.settings),
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(1000, session_ms // 4),
            # a batch may take a whole judge deadline (with retries) before the next fetch
            max_poll_interval_ms=int(max(300.0, 4 * self.settings.llm_timeout_s) * 1000),
        )

    async def run(self) -> None:
        consumer = self._consumer()
        runner = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                await runner._drain({tp for tp in revoked}, consumer)

            async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                runner.assigned = True

        consumer.subscribe([self.topic], listener=Listener())
        await consumer.start()
        try:
            while True:
                await self._step(consumer)
        finally:
            for task in self.tasks:
                task.cancel()  # unfinished jobs are not committed: they come back
            with contextlib.suppress(Exception):
                await self._commit(consumer)
            await consumer.stop()

    async def _step(self, consumer: AIOKafkaConsumer) -> None:
        free = self.max_in_flight - len(self.tasks)
        if free <= 0:
            await asyncio.wait(list(self.tasks), return_when=asyncio.FIRST_COMPLETED)
        else:
            batch = await consumer.getmany(timeout_ms=200, max_records=free)
            for tp, records in batch.items():
                for record in records:
                    self.tracker.started(tp, record.offset)
                    task = asyncio.create_task(self._run_one(record))
                    self.tasks[task] = (tp, record.offset)
                    task.add_done_callback(self._done)
        if time.monotonic() - self.last_commit >= COMMIT_INTERVAL_S:
            await self._commit(consumer)

    async def _run_one(self, record: ConsumerRecord) -> None:
        await self.handle(record)

    def _done(self, task: asyncio.Task[Any]) -> None:
        tp, offset = self.tasks.pop(task)
        if task.cancelled():
            return
        if task.exception() is not None:
            # the handler dead-letters or exits on its own; this is a bug: do not commit it
            log.error("judge job %s@%d failed", tp, offset, exc_info=task.exception())
            return
        self.tracker.finished(tp, offset)

    async def _commit(self, consumer: AIOKafkaConsumer) -> None:
        offsets = {
            tp: off for tp, off in self.tracker.safe().items() if tp in consumer.assignment()
        }
        self.last_commit = time.monotonic()
        if offsets:
            await consumer.commit({tp: OffsetAndMetadata(off, "") for tp, off in offsets.items()})
            self.tracker.committed.update(offsets)

    async def _drain(self, revoked: set[TopicPartition], consumer: AIOKafkaConsumer) -> None:
        """Before giving partitions away, finish their jobs (bounded by the judge deadline)."""
        mine = [t for t, (tp, _) in self.tasks.items() if tp in revoked]
        if mine:
            await asyncio.wait(mine, timeout=self.settings.llm_timeout_s + 5)
        with contextlib.suppress(Exception):
            await self._commit(consumer)
        self.tracker.forget(revoked)
