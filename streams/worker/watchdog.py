"""Turns a silent stall of consumption into a loud exit.

A Faust worker restarted after a kill -9 was seen (rarely) to stop fetching its input after
recovery while reporting itself ready. The watchdog compares, for the input partitions this
worker owns, the group's committed offsets with the log end: lag that does not move while the
agent processes nothing for `stall_timeout_s` makes /health say "stalled" and the process exit,
so its supervisor restarts it and the uncommitted events are delivered again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tracejudge.streams.settings import Settings

log = logging.getLogger(__name__)


class StallWatchdog:
    def __init__(
        self,
        settings: Settings,
        topics: list[str],
        owned: Callable[[], set[TopicPartition]],
        last_progress: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.topics = topics
        self.owned = owned
        self.last_progress = last_progress
        self.stalled_since: float | None = None
        self._previous: dict[TopicPartition, int] = {}

    async def lagging_without_progress(
        self, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer
    ) -> bool:
        tps = sorted(tp for tp in self.owned() if tp.topic in self.topics)
        if not tps:
            return False
        ends = await consumer.end_offsets(tps)
        offsets = await admin.list_consumer_group_offsets(self.settings.app_id)
        committed = {tp: meta.offset for tp, meta in offsets.items() if tp in ends}
        lag = any(committed.get(tp, 0) < ends[tp] for tp in tps)
        moved = committed != self._previous
        self._previous = committed
        return lag and not moved

    async def run(self, on_stall: Callable[[str], None]) -> None:
        interval = max(1.0, min(10.0, self.settings.stall_timeout_s / 4))
        admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka_bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.kafka_bootstrap)
        await admin.start()
        await consumer.start()
        try:
            while True:
                await asyncio.sleep(interval)
                now = time.monotonic()
                try:
                    stuck = await self.lagging_without_progress(admin, consumer)
                except Exception as exc:  # the broker being away is not a stall of ours
                    log.debug("watchdog check failed: %r", exc)
                    continue
                idle = now - self.last_progress() >= self.settings.stall_timeout_s
                if not (stuck and idle):
                    self.stalled_since = None
                    continue
                if self.stalled_since is None:
                    self.stalled_since = now
                    log.warning(
                        "input lag is not moving and no event was processed for %.0fs",
                        self.settings.stall_timeout_s,
                    )
                elif now - self.stalled_since >= interval:
                    on_stall(f"consumption stalled for over {self.settings.stall_timeout_s:g}s")
        finally:
            await consumer.stop()
            await admin.close()
