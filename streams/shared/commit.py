"""When an input record may be committed: the at-least-once rule, in one place.

Faust commits, per partition, the offset below which every record is acknowledged (its ack
set; `processing_guarantee="at_least_once"`). So the rule is when a record is acknowledged,
and `CommitRule.handle` is the only code that acknowledges one. For each record, in order:

1. **No gap.** Its offset must be the next one of its partition (`Admission`, the worker's
   `OffsetGuard` below). A record beyond a hole is not handled and never acknowledged: the
   consumer is sent back, so no offset is committed over records nobody handled.
2. **Handled.** The handler runs under the error policy: the record is processed, or
   dead-lettered with its reason. A Kafka failure, or an output that cannot be delivered,
   exits the process instead, and nothing more is committed.
3. **Outputs acknowledged.** What the handler left for `later` is done: every record it
   produced acknowledged by the broker (evaluation, reflection, alerts, judge job, decision),
   the Redis write tried (best effort), a closed window's steps forgotten.
4. **Held steps written.** A step kept only in memory (`windows.Held`) is acknowledged when it
   is written to the changelog, or when its window's verdict is acknowledged (3). Held steps
   dropped when their partition is revoked are never acknowledged here: the next owner reads
   them again.

Then Faust commits. A crash anywhere before reads the record again; every output carries a
deterministic id (`evaluation_id`, the decision's key), so a duplicate is recognisable.

The judge-requests consumer follows the same rule with its own consumer (`judge/consumer.py`:
a job is committed once its verdict is published). Outside a record's handling (the judge
stage, the replay engine, unit tests) `later` awaits the work at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.shared.metrics import Metrics

if TYPE_CHECKING:  # outputs import `later` from here, and the error policy imports outputs
    from tracejudge.streams.shared.errors import ErrorPolicy

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_pending: ContextVar[list[Awaitable[Any]] | None] = ContextVar("tracejudge_pending", default=None)

Ack = Callable[[], object]  # marks the record processed (Faust's `Event.ack`): synchronous
Handler = Callable[[InRecord], Awaitable[None]]


async def later(work: Awaitable[Any]) -> None:
    """Run `work` once the current record is handled and before it is acknowledged (steps 3
    and 4); outside a record's handling, now. Works registered for one record run one after
    the other."""
    pending = _pending.get()
    if pending is None:
        await work
    else:
        pending.append(work)


@dataclass
class Held:
    """Step records kept only in memory (`worker/windows.py`), and the acknowledgement their
    input records wait for (step 4)."""

    since: float
    # an open window's by seq; a closed one read again, by event id
    records: dict[Any, Any] = field(default_factory=dict)
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def release(self) -> None:
        """Written, or judged and acknowledged: the input records may be acknowledged."""
        if not self.done.done():
            self.done.set_result(None)

    def drop(self) -> None:
        """Another worker takes over: never acknowledged here, read again there."""
        self.done.cancel()


# -- step 1: no gap ------------------------------------------------------------------------
#
# No skipped input: the next offset each owned input partition must deliver, and a seek back
# when a record arrives beyond it.
#
# After a rebalance Faust can resume fetching before it seeks to the committed offsets
# (faust-streaming #216, #221): records are fetched and dropped, the agent then sees a later
# offset, and the hole is processed only after the next rebalance, if ever (a window may be closed
# meanwhile without its final_response). So the agent asks this guard before handling a record:
#
# - the first record of a partition after an assignment is compared with the group's committed
#   offset, read from the broker;
# - a record at or below the next expected offset is handled (below: a re-read after a seek,
#   harmless since duplicates are dropped by event id);
# - a record beyond it is not handled: the consumer is sent back to the expected offset, and the
#   records up to this one come again in order. Records still buffered beyond the hole are passed
#   over meanwhile (they come again too; Faust cannot commit past the hole, whose offsets it never
#   acknowledged).
#
# Records Faust had already taken from the fetcher before the seek can move its read position
# past the hole again, so the seek is repeated from a timer (`retry`) until the hole is read.
# Offsets that hold no record (transaction markers of a transactional producer) are recognised
# by reading the partition directly, and passed over.
#
# A hole at the end of a partition shows no later record. When traffic stops as a rebalance
# starts, the records handled but not yet committed can be passed over on reassignment, all of
# them or all but the first few (Faust drops fetched records below its read position, which a
# record fetched before its seek can have moved past them), and nothing comes after:
# the group's commit would stay behind the log end for good (lag that never drains, records read
# again after the next restart). So the timer also watches each partition's next offset to
# handle: unmoved for `STUCK_S` while the consumer's position is past it, the records in between
# were passed over, and the consumer is sent back as for any hole (to the committed offset when
# no record came since the assignment). A partition merely slow to deliver (its records behind a
# backlog of others) is sent back too: a few records read twice, which duplicates by event id
# make harmless, where a missed hole would leave the commit stuck.

SEEK_RETRY_S = 2.0  # a seek not answered by the re-read within this long is sent again
STUCK_S = 10.0  # a partition's next offset unmoved this long is checked for a hole behind it


async def _position_unknown(tp: TopicPartition) -> int | None:
    return None


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
    # the consumer's next fetch offset of a partition (None: not known)
    position: Callable[[TopicPartition], Awaitable[int | None]] = _position_unknown
    clock: Callable[[], float] = time.monotonic
    expected: dict[TopicPartition, int] = field(default_factory=dict)
    pending: dict[TopicPartition, _Seek] = field(default_factory=dict)
    # per owned partition: its next offset to handle as last seen (None: no record since the
    # assignment), and since when it has not moved
    progress: dict[TopicPartition, tuple[int | None, float]] = field(default_factory=dict)

    def reset(self) -> None:
        """Partitions were revoked: the next assignment starts from committed offsets again."""
        self.expected.clear()
        self.pending.clear()
        self.progress.clear()

    def assigned(self, tps: Iterable[TopicPartition]) -> None:
        """Partitions are consumed from now on: watched for a hole no record reveals."""
        now = self.clock()
        for tp in tps:
            self.progress.setdefault(tp, (self.expected.get(tp), now))

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
            log.warning(
                "%s[%d]: got offset %d, expected %d: %d record(s) skipped by the consumer; "
                "seeking back",
                *tp,
                offset,
                expected,
                offset - expected,
            )
            await self._send_back(tp, expected)
        return False  # it comes again after the hole

    async def _send_back(self, tp: TopicPartition, offset: int) -> None:
        self.metrics.counts["offset_skips_repaired"] += 1
        self.pending[tp] = _Seek(offset, self.clock())
        self.forget_gap(tp)
        await self.seek(tp, offset)

    async def retry(self) -> None:
        """Seek again where the hole has not come back yet; pass over offsets with no record;
        send the consumer back over a hole at the end of a partition."""
        await self._repeat_seeks()
        await self._check_stuck()

    async def _check_stuck(self) -> None:
        now = self.clock()
        for tp, (seen, since) in list(self.progress.items()):
            current = self.expected.get(tp)
            if current != seen:
                self.progress[tp] = (current, now)
                continue
            if tp in self.pending or now - since < STUCK_S:
                continue
            try:
                position = await self.position(tp)
                target = current if current is not None else await self.committed(tp)
            except Exception as exc:  # the broker away: the watchdog says so
                log.debug("%s[%d]: cannot look for a hole at the end: %r", *tp, exc)
                if self.progress.get(tp) == (seen, since):
                    self.progress[tp] = (current, now)  # look again in STUCK_S
                continue
            if self.progress.get(tp) != (seen, since) or self.expected.get(tp) != current:
                continue  # a record or a revocation came meanwhile
            self.progress[tp] = (current, now)  # looked at: next look in STUCK_S
            if position is None or target is None or position <= target:
                continue  # nothing passed over
            log.warning(
                "%s[%d]: the consumer is at offset %d but no record from %d was handled for "
                "%.0fs: %d record(s) passed over; seeking back",
                *tp,
                position,
                target,
                now - since,
                position - target,
            )
            self.expected[tp] = target
            await self._send_back(tp, target)

    async def _repeat_seeks(self) -> None:
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


class Admission(Protocol):
    async def admit(self, tp: tuple[str, int], offset: int) -> bool:
        """Whether the record at `offset` is the next to handle (step 1)."""
        ...


@dataclass
class CommitRule:
    """Records whose outputs are still being acknowledged, at most `limit` at once."""

    errors: ErrorPolicy
    admission: Admission | None = None  # None: every record is the next (tests, replay)
    limit: int = 1000
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, record: InRecord, handler: Handler, ack: Ack) -> None:
        """Steps 1 to 4 for one record; nothing raised here reaches `async for`."""
        if self.admission is not None:  # 1. no gap
            try:
                admitted = await self.admission.admit(
                    (record.topic, record.partition), record.offset
                )
            except Exception as exc:
                self.errors.exit("cannot check a record's offset against the group's", exc)
            if not admitted:
                return  # never acknowledged: it comes again after the hole
        pending: list[Awaitable[Any]] = []
        token = _pending.set(pending)
        try:
            await self.errors.run(record, handler)  # 2. handled or dead-lettered
        finally:
            _pending.reset(token)
        if not pending:
            ack()
            return
        if len(pending) == 1 and isinstance(pending[0], asyncio.Future):
            # 4. a held step alone: no task while it waits, and no place in `limit`, which
            # bounds outputs in flight, not steps held (bounded by the store itself)
            pending[0].add_done_callback(partial(self._released, ack))
            return
        while len(self.tasks) >= self.limit:
            await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        task = asyncio.ensure_future(self._finish(pending, ack))  # 3. (and 4.) then ack
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _finish(self, pending: list[Awaitable[Any]], ack: Ack) -> None:
        try:
            for work in pending:
                await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.errors.exit("a record's outputs could not be delivered", exc)
            return  # (an exit that returns: tests)
        ack()

    def _released(self, ack: Ack, held: asyncio.Future[Any]) -> None:
        if not held.cancelled():  # cancelled: dropped, the record is read again elsewhere
            ack()

    async def drain(self) -> None:
        """Wait until every record in flight (held steps aside) is acknowledged."""
        await asyncio.sleep(0)  # acknowledgements of steps just released start
        while self.tasks:
            await asyncio.wait(set(self.tasks))
            await asyncio.sleep(0)
