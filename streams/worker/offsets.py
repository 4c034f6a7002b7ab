"""No skipped input: the next offset each owned input partition must deliver, and a seek back
when a record arrives beyond it.

After a rebalance Faust can resume fetching before it seeks to the committed offsets
(faust-streaming #216, #221): records are fetched and dropped, the agent then sees a later
offset, and the hole is processed only after the next rebalance, if ever (a window may be closed
meanwhile without its final_response). So the agent asks this guard before handling a record:

- the first record of a partition after an assignment is compared with the group's committed
  offset, read from the broker;
- a record at or below the next expected offset is handled (below: a re-read after a seek,
  harmless since duplicates are dropped by event id);
- a record beyond it is not handled: the consumer is sent back to the expected offset, and the
  records up to this one come again in order. Records still buffered beyond the hole are passed
  over meanwhile (they come again too; Faust cannot commit past the hole, whose offsets it never
  acknowledged).

Records Faust had already taken from the fetcher before the seek can move its read position
past the hole again, so the seek is repeated from a timer (`retry`) until the hole is read.
Offsets that hold no record (transaction markers of a transactional producer) are recognised
by reading the partition directly, and passed over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AIOTopicPartition

from tracejudge.streams.metrics import Metrics

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
SEEK_RETRY_S = 2.0  # a seek not answered by the re-read within this long is sent again


@dataclass
class _Seek:
    target: int
    at: float
    attempts: int = 1


@dataclass
class OffsetGuard:
    committed: Callable[[TopicPartition], Awaitable[int | None]]
    seek: Callable[[TopicPartition, int], Awaitable[None]]
    # the offset of the first record at or after an offset, read from the broker (None: none)
    first_offset: Callable[[TopicPartition, int], Awaitable[int | None]]
    metrics: Metrics
    # forget the consumer's own idea of the hole (see `forget_faust_gap`)
    forget_gap: Callable[[TopicPartition], None] = lambda tp: None
    clock: Callable[[], float] = time.monotonic
    expected: dict[TopicPartition, int] = field(default_factory=dict)
    pending: dict[TopicPartition, _Seek] = field(default_factory=dict)

    def reset(self) -> None:
        """Partitions were revoked: the next assignment starts from committed offsets again."""
        self.expected.clear()
        self.pending.clear()

    async def admit(self, tp: TopicPartition, offset: int) -> bool:
        """Whether to handle the record at `offset` now."""
        expected = self.expected.get(tp)
        if expected is None:
            committed = await self.committed(tp)
            expected = offset if committed is None else committed
        if offset <= expected:
            if offset == expected:
                self.expected[tp] = offset + 1
                if tp in self.pending:
                    seek = self.pending.pop(tp)
                    self.forget_gap(tp)
                    log.info("%s[%d]: hole read again from %d", *tp, seek.target)
            else:
                self.expected[tp] = expected
            return True
        self.expected[tp] = expected
        if tp not in self.pending:
            self.metrics.counts["offset_skips_repaired"] += 1
            log.warning(
                "%s[%d]: got offset %d, expected %d: %d record(s) skipped by the consumer; "
                "seeking back",
                *tp,
                offset,
                expected,
                offset - expected,
            )
            self.pending[tp] = _Seek(expected, self.clock())
            self.forget_gap(tp)
            await self.seek(tp, expected)
        return False  # it comes again after the hole

    async def retry(self) -> None:
        """Seek again where the hole has not come back yet; pass over offsets with no record."""
        now = self.clock()
        for tp, seek in list(self.pending.items()):
            if now - seek.at < SEEK_RETRY_S:
                continue
            first = await self.first_offset(tp, seek.target)
            if first is not None and first > seek.target:
                log.warning(
                    "%s[%d]: offsets %d..%d hold no record; going on from %d",
                    *tp,
                    seek.target,
                    first - 1,
                    first,
                )
                self.metrics.counts["offset_gaps_without_records"] += 1
                self.expected[tp] = first
            target = self.expected[tp]
            self.pending[tp] = _Seek(target, now, seek.attempts + 1)
            self.metrics.counts["offset_seeks_repeated"] += 1
            await self.seek(tp, target)

    def processed(self) -> dict[TopicPartition, int]:
        """The next offset to process per partition: everything below it was handled."""
        return dict(self.expected)


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
