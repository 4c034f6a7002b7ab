"""Turns silent failures of consumption into loud ones: a stall, or a broker that is gone.

Every few seconds the watchdog asks the broker for the log end and the group's committed offsets
of the input partitions this worker owns.

- **Stall.** A Faust worker restarted after a kill -9 was seen (rarely) to stop fetching its
  input after recovery while reporting itself ready. Lag that does not move while the agents
  process nothing for `stall_timeout_s` makes /health say "stalled" and the process exit, so its
  supervisor restarts it and the uncommitted events are delivered again.
- **Broker gone.** When the probe has failed for `BROKER_DOWN_HEALTH_S` and no broker of the
  cluster answers, /health says "broker_unreachable" (503); after `broker_down_exit_s` of failed
  probes the process exits for its supervisor. While some brokers answer (one of three down,
  its partitions moving to the others) /health stays 200 with `broker` "degraded".

The committed offsets are read with a consumer of the group (an OffsetFetch, which every broker
answers, the embedded one included), not with the admin API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from tracejudge.settings import Settings
from tracejudge.streams.kafka.brokers import BrokerCensus, BrokerCount
from tracejudge.streams.kafka.security import client_options

log = logging.getLogger(__name__)

# Log end and committed offset of each owned input partition, after each probe.
OffsetsSeen = Callable[[dict[TopicPartition, int], dict[TopicPartition, int]], None]

PROBE_INTERVAL_S = 5.0
PROBE_TIMEOUT_S = 5.0
# A broker silent for this long makes /health answer 503: a blip of one probe is not an outage.
BROKER_DOWN_HEALTH_S = 10.0
# Commits unmoved this many stall timeouts (while later records were processed): a hole.
COMMIT_STALL_FACTOR = 3


class StallWatchdog:
    def __init__(
        self,
        settings: Settings,
        topics: list[str],
        owned: Callable[[], set[TopicPartition]],
        last_progress: Callable[[], float],
        clock: Callable[[], float] = time.monotonic,
        on_offsets: OffsetsSeen | None = None,
        on_broker_lost: Callable[[], None] | None = None,
        processed: Callable[[], dict[TopicPartition, int]] | None = None,
        report: Callable[[], str] | None = None,
    ) -> None:
        self.settings = settings
        self.topics = topics
        self.owned = owned
        self.last_progress = last_progress
        self.clock = clock
        self.on_offsets = on_offsets
        self.on_broker_lost = on_broker_lost
        self.processed = processed
        self.report = report  # the consumer's state, logged when a stall is first seen
        # per partition behind what was processed: its committed offset, and since when unmoved
        self.behind: dict[TopicPartition, tuple[int, float]] = {}
        self.stalled_since: float | None = None
        self.broker_down_since: float | None = None
        self.probe_failures = 0
        self._previous: dict[TopicPartition, int] = {}
        self.census = BrokerCensus(settings, timeout_s=2.0, clock=clock)

    def brokers(self) -> BrokerCount | None:
        """The brokers answering at the last probe (None before the first)."""
        return self.census.last

    def broker_unreachable(self) -> bool:
        """No broker has answered for `BROKER_DOWN_HEALTH_S`. A failing probe while others
        answer is a cluster moving partitions off a dead broker: not a reason to be restarted."""
        since = self.broker_down_since
        if since is None or self.clock() - since < BROKER_DOWN_HEALTH_S:
            return False
        count = self.census.last
        return count is None or count.answering == 0

    async def lagging_without_progress(self, consumer: AIOKafkaConsumer) -> bool:
        tps = sorted(tp for tp in self.owned() if tp.topic in self.topics)
        if not tps:
            await consumer.topics()  # still ask the broker something: it may be gone
            if self.on_offsets is not None:
                self.on_offsets({}, {})
            return False
        ends = await consumer.end_offsets(tps)
        committed = {tp: await consumer.committed(tp) for tp in tps}
        offsets = {tp: off for tp, off in committed.items() if off is not None}
        if self.on_offsets is not None:
            self.on_offsets(ends, offsets)
        lag = any(offsets.get(tp, 0) < ends[tp] for tp in tps)
        moved = offsets != self._previous
        self._previous = offsets
        return lag and not moved

    def _consumer(self) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            **client_options(self.settings),
            group_id=self.settings.app_id,  # never subscribes: reads the group's commits only
            enable_auto_commit=False,
            request_timeout_ms=int(PROBE_TIMEOUT_S * 1000),
            metadata_max_age_ms=int(PROBE_INTERVAL_S * 1000),
        )

    async def run(self, on_stall: Callable[[str], None]) -> None:
        consumer: AIOKafkaConsumer | None = None
        try:
            while True:
                await asyncio.sleep(PROBE_INTERVAL_S)
                if consumer is None:
                    # The broker may be gone already (even between the worker's start and
                    # this task's): not reaching it is what this watches for, never a crash.
                    consumer = await self._started(on_stall)
                    if consumer is None:
                        continue
                await self.check(consumer, on_stall)
        finally:
            if consumer is not None:
                await consumer.stop()

    async def _started(self, on_stall: Callable[[str], None]) -> AIOKafkaConsumer | None:
        consumer = self._consumer()
        try:
            await asyncio.wait_for(consumer.start(), PROBE_TIMEOUT_S)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await consumer.stop()
            await self.take_census()
            self._broker_failed(self.clock(), exc, on_stall)
            return None
        return consumer

    async def take_census(self) -> BrokerCount:
        before = self.census.last
        count = await self.census.count()
        if before is None or count.state != before.state:
            level = logging.INFO if count.state == "ok" else logging.WARNING
            log.log(level, "%d of %d brokers answering", count.answering, count.known)
        return count

    async def check(self, consumer: AIOKafkaConsumer, on_stall: Callable[[str], None]) -> None:
        now = self.clock()
        try:
            stuck = await asyncio.wait_for(self.lagging_without_progress(consumer), PROBE_TIMEOUT_S)
        except Exception as exc:
            await self.take_census()
            self._broker_failed(now, exc, on_stall)
            return
        await self.take_census()
        if self.broker_down_since is not None:
            log.warning("broker reachable again after %.0fs", now - self.broker_down_since)
            self.broker_down_since = None
        stuck_commit = self.commits_stuck(self._previous, now)
        if stuck_commit is not None:
            on_stall(stuck_commit)
            return
        idle = now - self.last_progress() >= self.settings.stall_timeout_s
        if not (stuck and idle):
            self.stalled_since = None
            return
        if self.stalled_since is None:
            self.stalled_since = now
            log.warning(
                "input lag is not moving and no event was processed for %.0fs%s",
                self.settings.stall_timeout_s,
                "" if self.report is None else ":\n  " + self.report(),
            )
        elif now - self.stalled_since >= PROBE_INTERVAL_S:
            on_stall(f"consumption stalled for over {self.settings.stall_timeout_s:g}s")

    def commits_stuck(self, committed: dict[TopicPartition, int], now: float) -> str | None:
        """A committed offset that does not move at all while later records were processed
        means a hole Faust will not commit past (records fetched and never handed to the
        agent): exit, and they are read again. Commits only lagging behind a busy worker (Faust
        commits after flushing its producer) still move, and are left alone."""
        processed = self.processed() if self.processed is not None else {}
        for tp in list(self.behind):
            if tp not in processed:
                del self.behind[tp]
        limit = COMMIT_STALL_FACTOR * self.settings.stall_timeout_s
        for tp, done in processed.items():
            offset = committed.get(tp)
            if offset is None:
                continue
            if offset >= done:
                self.behind.pop(tp, None)
                continue
            mark = self.behind.get(tp)
            if mark is None or mark[0] != offset:
                self.behind[tp] = (offset, now)  # behind, but it moved: watch from here
            elif now - mark[1] >= limit:
                return (
                    f"{tp.topic}[{tp.partition}]: committed offset {offset} has not moved for "
                    f"{now - mark[1]:.0f}s while records up to {done - 1} were processed"
                )
        return None

    def _broker_failed(
        self, now: float, exc: BaseException, on_stall: Callable[[str], None]
    ) -> None:
        self.probe_failures += 1
        if self.on_broker_lost is not None:
            self.on_broker_lost()
        if self.broker_down_since is None:
            self.broker_down_since = now
            count = self.census.last
            if count is not None and count.answering:
                log.warning(
                    "offsets probe failed (%r) with %d of %d brokers answering: partitions or "
                    "the group coordinator moving; /health stays 200",
                    exc,
                    count.answering,
                    count.known,
                )
            else:
                log.warning("broker not answering (%r); /health turns 503 if this lasts", exc)
            return
        down_s = now - self.broker_down_since
        if down_s >= self.settings.broker_down_exit_s:
            on_stall(f"broker unreachable for {down_s:.0f}s")
