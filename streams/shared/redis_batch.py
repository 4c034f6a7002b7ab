"""Redis commands of many verdicts in one pipeline: one round trip for what ~20 ms bring.

The worker writes Redis on every verdict: the evaluation (and its timeline) for agents to read,
the kept verdict for its outcomes. Each writer queued its own pipeline, so a verdict cost two
round trips, each a send, a read and the wake-ups around them. Every writer of one client now
queues here: what is queued while a pipeline waits (`LINGER_S`) or is on its way goes in the
next one, whoever queued it, and each caller gets the replies to its own commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

# adds a caller's commands to the pipeline; how many it added
Commands = Callable[[Pipeline], int]


class PipelineBatch:
    MAX_BATCH = 500  # callers per pipeline
    # A pipeline waits this long for more before it goes, unless a caller is waited on (an
    # agent polls for its early-stop decision). Verdicts close a few milliseconds apart under
    # load, so without it most pipelines carried one or two; what waits is a look-up copy (the
    # evaluation on its topic is out already) and the input record's acknowledgement.
    LINGER_S = 0.02

    def __init__(self, client: aioredis.Redis, linger_s: float = LINGER_S) -> None:
        self.client = client
        self.linger_s = linger_s
        self._queue: list[tuple[Commands, asyncio.Future[list[Any]]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._urgent = asyncio.Event()

    async def run(self, commands: Commands, *, urgent: bool = False) -> list[Any]:
        """The replies to `commands`, in order; raises what the pipeline raised. `urgent`: the
        pipeline goes without waiting for more."""
        done: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._queue.append((commands, done))
        if urgent:
            self._urgent.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write())
        return await done

    async def flush(self) -> None:
        """Wait until what is queued has been written (or failed)."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)

    async def _write(self) -> None:
        while self._queue:
            if self.linger_s > 0 and len(self._queue) < self.MAX_BATCH:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._urgent.wait(), self.linger_s)
            self._urgent.clear()
            batch, self._queue = self._queue[: self.MAX_BATCH], self._queue[self.MAX_BATCH :]
            try:
                async with self.client.pipeline(transaction=False) as pipe:
                    counts = [commands(pipe) for commands, _ in batch]
                    replies = await pipe.execute()
            except Exception as exc:  # RedisError, OSError, or anything: waiters must wake
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            at = 0
            for (_, done), count in zip(batch, counts, strict=True):
                if not done.done():
                    done.set_result(replies[at : at + count])
                at += count


_BATCHES: weakref.WeakKeyDictionary[aioredis.Redis, PipelineBatch] = weakref.WeakKeyDictionary()


def batch_of(client: aioredis.Redis) -> PipelineBatch:
    """The one batch of a client: every writer on it shares its pipelines."""
    batch = _BATCHES.get(client)
    if batch is None:
        batch = _BATCHES[client] = PipelineBatch(client)
    return batch
