"""Outputs awaited after a record is handled, so the next record never waits for them.

A handler sends its records (buffered by the producer) and hands what must be acknowledged
before its input may count as processed — the broker's acks, the Redis write, forgetting a
closed window's steps — to `later`. The agent then goes on with the next record while that work
runs; the record itself is acknowledged to Faust only when it is done, and Faust commits an
offset only when every record below it is acknowledged. At-least-once stays: a crash in between
delivers the record again.

Outside a record's handling (the judge stage, the replay engine, unit tests) `later` awaits the
work at once, as the code did before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import Any

_pending: ContextVar[list[Awaitable[Any]] | None] = ContextVar("tracejudge_pending", default=None)

Fail = Callable[[str, BaseException], Any]
Ack = Callable[[], object]  # marks the record processed (Faust's `Event.ack`): synchronous


async def later(work: Awaitable[Any]) -> None:
    """Run `work` once the current record is handled and before it is acknowledged; outside a
    record's handling, now. Works registered for one record run one after the other."""
    pending = _pending.get()
    if pending is None:
        await work
    else:
        pending.append(work)


@dataclass
class InFlight:
    """Records whose outputs are still being acknowledged, at most `limit` at once."""

    fail: Fail  # an output that cannot be delivered: the worker exits, the record comes again
    limit: int = 1000
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, handler: Callable[[], Awaitable[None]], ack: Ack) -> None:
        """Run `handler` for one record; `ack` it when what it left for later is done."""
        pending: list[Awaitable[Any]] = []
        token = _pending.set(pending)
        try:
            await handler()
        finally:
            _pending.reset(token)
        if not pending:
            ack()
            return
        if len(pending) == 1 and isinstance(pending[0], asyncio.Future):
            # a held step (windows.py): no task while it waits, and no place in `limit`, which
            # bounds outputs in flight, not steps held (bounded by the store itself)
            pending[0].add_done_callback(partial(self._released, ack))
            return
        while len(self.tasks) >= self.limit:
            await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        task = asyncio.ensure_future(self._finish(pending, ack))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _finish(self, pending: list[Awaitable[Any]], ack: Ack) -> None:
        try:
            for work in pending:
                await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.fail("a record's outputs could not be delivered", exc)
            return
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
