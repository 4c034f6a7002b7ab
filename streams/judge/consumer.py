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
from tracejudge.settings import Settings
from tracejudge.streams.kafka import membership
from tracejudge.streams.kafka.security import client_options

log = logging.getLogger(__name__)

Handler = Callable[[ConsumerRecord], Awaitable[None]]
# How many more jobs may start now, given the jobs taken and not finished (`JudgeStage.room`)
Room = Callable[[int], int]

# Finished jobs are committed at most this often (and when partitions go or the loop stops),
# not after every finished job (a broker round trip per judged verdict); a crash judges at
# most this much again (under the same evaluation_id).
COMMIT_INTERVAL_S = 1.0
# With no room, the partitions are paused and polled (getmany returns nothing for a paused
# partition, and drops nothing: its position stays at the first record not handed out) at least
# this often: aiokafka leaves the group when getmany is not called for max_poll_interval_ms,
# and a job may hold its place longer than that (a publish waiting out a broker outage)
IDLE_POLL_S = 1.0
# The judge queue's lag is read from the broker at most this often, off the fetch loop
LAG_INTERVAL_S = 5.0


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
    """Takes a job from Kafka only when `room` says one may start: what is not taken waits in
    Kafka (counted as the judge queue's lag), not in a local queue with a wait bound that would
    shed it to a rules-only verdict. Without `room`, up to twice the concurrency in flight."""

    def __init__(
        self, settings: Settings, topic: str, handle: Handler, room: Room | None = None
    ) -> None:
        self.settings = settings
        self.topic = topic
        self.handle = handle
        self.max_in_flight = settings.llm_concurrency * 2  # keep the pipe full
        self.room: Room = room or (lambda unfinished: self.max_in_flight - unfinished)
        self.tracker = OffsetTracker()
        # each job's partition, offset and Kafka timestamp (ms)
        self.tasks: dict[asyncio.Task[None], tuple[TopicPartition, int, int]] = {}
        self.assigned = False
        self.last_commit = 0.0
        self.group_id = f"{settings.app_id}{names.JUDGE_GROUP_SUFFIX}"
        self.queue_lag = 0  # jobs in Kafka not committed by the group on our partitions
        self._lag_at = 0.0
        self._lag_task: asyncio.Task[None] | None = None
        self._idle_since: float | None = None  # lag seen with nothing taken (see oldest_age)

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
        membership.stale_commits_keep_membership(consumer)
        try:
            while True:
                await self._step(consumer)
        finally:
            for task in self.tasks:
                task.cancel()  # unfinished jobs are not committed: they come back
            if self._lag_task is not None:
                self._lag_task.cancel()
            with contextlib.suppress(Exception):
                await self._commit(consumer)
            await consumer.stop()

    async def _step(self, consumer: AIOKafkaConsumer) -> None:
        free = self.room(len(self.tasks))
        if free <= 0:
            # no call slot for another job: it stays in Kafka, where it is lag, not a local wait
            if consumer.assignment() - consumer.paused():
                consumer.pause(*consumer.assignment())
            if self.tasks:
                await asyncio.wait(
                    list(self.tasks), timeout=IDLE_POLL_S, return_when=asyncio.FIRST_COMPLETED
                )
            else:
                await asyncio.sleep(IDLE_POLL_S)
            await consumer.getmany(timeout_ms=0)  # paused: nothing, but the group sees a poll
        else:
            if consumer.paused():
                consumer.resume(*consumer.paused())
            batch = await consumer.getmany(timeout_ms=200, max_records=free)
            for tp, records in batch.items():
                for record in records:
                    self.tracker.started(tp, record.offset)
                    task = asyncio.create_task(self._run_one(record))
                    self.tasks[task] = (tp, record.offset, record.timestamp)
                    task.add_done_callback(self._done)
        if time.monotonic() - self.last_commit >= COMMIT_INTERVAL_S:
            await self._commit(consumer)
        if time.monotonic() - self._lag_at >= LAG_INTERVAL_S and (
            self._lag_task is None or self._lag_task.done()
        ):
            self._lag_at = time.monotonic()
            self._lag_task = asyncio.create_task(self._read_lag(consumer))

    async def _read_lag(self, consumer: AIOKafkaConsumer) -> None:
        """The group's lag on this runner's partitions: log end minus committed offset (the
        jobs being judged and those waiting in Kafka). Broker round trips, in a task of its
        own so the fetch loop never waits for them; a failed read keeps the last figure."""
        tps = set(consumer.assignment())
        try:
            lag = 0
            if tps:
                ends = await consumer.end_offsets(list(tps))
                for tp in tps:
                    base = self.tracker.committed.get(tp)
                    if base is None:
                        base = await consumer.committed(tp)
                    if base is None:  # never committed: from the log's start
                        base = (await consumer.beginning_offsets([tp]))[tp]
                    lag += max(0, ends[tp] - base)
        except Exception as exc:  # a rebalance or a broker away: the next read tries again
            log.debug("reading the judge queue's lag failed: %r", exc)
            return
        self.queue_lag = lag
        if lag > 0 and not self.tasks:
            if self._idle_since is None:
                self._idle_since = time.time()
        else:
            self._idle_since = None

    def oldest_age(self, now: float | None = None) -> float:
        """Seconds since the oldest job taken and not finished was written to Kafka; 0 when
        none is waiting. Jobs are taken in offset order, so on each partition the jobs still
        in Kafka are younger than the ones taken. With nothing taken but a lag (for a moment
        before the next fetch, or a runner that does not fetch) the waiting record's time is
        not known without reading it: the age is then the time since the lag was seen with
        nothing taken, a lower bound that grows while nothing is taken."""
        now = time.time() if now is None else now
        if self.tasks:
            oldest_ms = min(ts for _, _, ts in self.tasks.values())
            return max(0.0, now - oldest_ms / 1000)
        if self._idle_since is not None and self.queue_lag > 0:
            return max(0.0, now - self._idle_since)
        return 0.0

    async def _run_one(self, record: ConsumerRecord) -> None:
        await self.handle(record)

    def _done(self, task: asyncio.Task[Any]) -> None:
        tp, offset, _ = self.tasks.pop(task)
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
        mine = [t for t, (tp, _, _) in self.tasks.items() if tp in revoked]
        if mine:
            await asyncio.wait(mine, timeout=self.settings.llm_timeout_s + 5)
        with contextlib.suppress(Exception):
            await self._commit(consumer)
        self.tracker.forget(revoked)
