"""When an input record may be committed: the at-least-once rule, in one place.

Faust commits, per partition, the offset below which every record is acknowledged (its ack
set; `processing_guarantee="at_least_once"`). So the rule is when a record is acknowledged,
and `CommitRule.handle` is the only code that acknowledges one. For each record, in order:

1. **No gap.** Its offset must be the next one of its partition (`Admission`, the worker's
   `offsets.OffsetGuard`). A record beyond a hole is not handled and never acknowledged: the
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

The judge-requests consumer follows the same rule with its own consumer (`judging/consumer.py`:
a job is committed once its verdict is published). Outside a record's handling (the judge
stage, the replay engine, unit tests) `later` awaits the work at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from tracejudge.streams.kafka.records import InRecord

if TYPE_CHECKING:  # outputs import `later` from here, and the error policy imports outputs
    from tracejudge.streams.errors import ErrorPolicy

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
