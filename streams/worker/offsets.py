"""The group's committed offsets and a partition's first record, read from the broker: what
the commit rule's gap check (`streams/shared/commit.py` `OffsetGuard`) asks."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AIOTopicPartition

TopicPartition = tuple[str, int]


class GroupOffsets:
    """The group's committed offsets, read from the broker with a consumer of the group that
    never subscribes (an OffsetFetch; it does not join or disturb the group)."""

    ATTEMPTS = 6

    def __init__(self, connection: dict[str, Any], group_id: str) -> None:
        self.connection = connection  # bootstrap servers and security: client_options()
        self.group_id = group_id
        self._consumer: AIOKafkaConsumer | None = None

    async def committed(self, tp: TopicPartition) -> int | None:
        last: Exception | None = None
        for attempt in range(self.ATTEMPTS):
            try:
                consumer = await self._started()
                return await asyncio.wait_for(
                    consumer.committed(AIOTopicPartition(*tp)), timeout=5.0
                )
            except Exception as exc:  # the broker may be briefly away during a rebalance
                last = exc
                await asyncio.sleep(min(2.0, 0.2 * 2**attempt))
        raise RuntimeError(f"cannot read the committed offset of {tp}: {last!r}")

    async def first_offset(self, tp: TopicPartition, offset: int) -> int | None:
        """The offset of the first record at or after `offset`, reading the partition directly
        (a consumer without a group: nothing is committed)."""
        reader = AIOKafkaConsumer(**self.connection, enable_auto_commit=False)
        await reader.start()
        try:
            partition = AIOTopicPartition(*tp)
            reader.assign([partition])
            reader.seek(partition, offset)
            batch = await reader.getmany(partition, timeout_ms=2000, max_records=1)
            records = batch.get(partition, [])
            return records[0].offset if records else None
        finally:
            await reader.stop()

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                **self.connection, group_id=self.group_id, enable_auto_commit=False
            )
            await consumer.start()
            self._consumer = consumer
        return self._consumer
