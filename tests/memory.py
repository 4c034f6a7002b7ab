"""In-memory collaborators of the worker's handlers: channels that record, a dict lookup.

With these, `WorkerContext.build` gives the worker's real handlers without Kafka or Redis
(openai-agents' in-memory test processor is the model).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NoReturn

from aiokafka.errors import MessageSizeTooLargeError

from tracejudge.settings import Settings
from tracejudge.streams.agreement.store import AgreementStore
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.replay.engine import MemoryLookup
from tracejudge.streams.worker.context import Channels, Tables, WorkerContext


@dataclass
class Sent:
    key: bytes | None
    value: bytes | None
    partition: int | None
    headers: dict[str, bytes]

    def json(self) -> Any:
        return json.loads(self.value or b"")


@dataclass
class MemoryChannel:
    """A topic that keeps what was sent; `fail_with` makes the next sends raise, and a value
    over `max_value_bytes` is refused as the producer refuses it."""

    sent: list[Sent] = field(default_factory=list)
    fail_with: BaseException | None = None
    max_value_bytes: int | None = None

    async def send(
        self,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> Awaitable[Any]:
        if self.fail_with is not None:
            raise self.fail_with
        if self.max_value_bytes is not None and len(value or b"") > self.max_value_bytes:
            raise MessageSizeTooLargeError(f"{len(value or b'')} bytes")
        self.sent.append(Sent(key, value, partition, dict(headers or ())))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def values(self) -> list[Any]:
        return [s.json() for s in self.sent]


class Exited(Exception):
    """Raised by the fake exit: the worker would have exited for its supervisor here."""


def fake_exit(reason: str, exc: BaseException) -> NoReturn:
    raise Exited(reason) from exc


@dataclass
class Clock:
    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class MemoryWorker:
    ctx: WorkerContext
    channels: Channels
    tables: Tables
    lookup: MemoryLookup
    clock: Clock
    offsets: dict[str, int] = field(default_factory=dict)

    def channel(self, name: str) -> MemoryChannel:
        channel = getattr(self.channels, name)
        assert isinstance(channel, MemoryChannel)
        return channel

    def record(
        self,
        topic: str,
        value: Any,
        headers: dict[str, bytes] | None = None,
        partition: int = 0,
        key: bytes | None = None,
    ) -> InRecord:
        """A consumed record; keyed by the value's request_id unless `key` is given."""
        raw = value if isinstance(value, bytes | None) else json.dumps(value).encode()
        if key is None and isinstance(value, dict) and isinstance(value.get("request_id"), str):
            key = value["request_id"].encode()
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        return InRecord(topic, partition, offset, key, raw, headers or {})

    async def event(self, value: Any, **kw: Any) -> None:
        """One record through the window agent's error policy and handler."""
        await self.ctx.errors.run(self.record("events", value, **kw), self.ctx.events)

    async def response(self, value: Any) -> None:
        await self.ctx.errors.run(self.record("responses", value), self.ctx.responses)

    async def session_records(self) -> int:
        """What was sent to the session-turns topic since the last call, through the session
        agent's handler in order (as the session agent takes them); how many."""
        assert self.ctx.sessions is not None, "sessions are off"
        return await self._taken("session_turns", self.ctx.sessions)

    async def mode_records(self) -> int:
        """What was sent to the mode-runs topic since the last call, through the modes agent's
        handler in order; how many (0 with modes off)."""
        return 0 if self.ctx.modes is None else await self._taken("mode_runs", self.ctx.modes)

    async def _taken(self, topic: str, handler: Callable[[InRecord], Awaitable[None]]) -> int:
        """An internal topic's records sent since the last call, through its agent's handler."""
        sent = self.channel(topic).sent
        start = self.offsets.get(topic, 0)
        for item in sent[start:]:
            await self.ctx.errors.run(self.record(topic, item.value, key=item.key), handler)
        return len(sent) - start


def memory_worker(
    agreement: AgreementStore | None = None, tables: Tables | None = None, **settings: Any
) -> MemoryWorker:
    """`agreement`: where final verdicts are kept and outcomes joined (None: outcomes are only
    counted, as in a worker without Redis). `tables`: another worker's, as a new owner of its
    partitions reads them after a rebalance (None: empty)."""
    channels = Channels(**{f.name: MemoryChannel() for f in fields(Channels)})
    tables = tables or Tables({}, {}, {})
    lookup, clock = MemoryLookup(), Clock()
    config = Settings(redis_url="", **settings)
    ctx = WorkerContext.build(
        config,
        channels,
        tables,
        None,
        lookup=lookup,
        clock=clock,
        exit=fake_exit,
        agreement=agreement,
    )
    # every partition consumed live from the start, as after a worker caught up
    ctx.partitions.observe({p: 0 for p in range(config.partitions)}, {})
    return MemoryWorker(ctx, channels, tables, lookup, clock)
