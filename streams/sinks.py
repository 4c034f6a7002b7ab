"""Where verdicts go: the output topics (delivery awaited) and Redis (best effort)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel
from redis.exceptions import RedisError

from tracejudge.judges.verdicts import Decision
from tracejudge.models.outputs import Evaluation

log = logging.getLogger(__name__)


def redis_client(url: str, timeout_s: float = 1.0) -> aioredis.Redis | None:
    """One client per worker, short timeouts: Redis must never hold the stream up."""
    if not url:
        return None
    return aioredis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


def encode(model: BaseModel) -> bytes:
    return model.model_dump_json().encode("utf-8")


class Emitter:
    """Sends a decision's events and waits until the broker has them.

    The window is marked closed only after this returns, so a crash in between re-judges the
    request on restart (same evaluation_id) rather than losing its verdict.
    """

    def __init__(self, evaluations: Any, reflections: Any, alerts: Any) -> None:
        self.evaluations = evaluations
        self.reflections = reflections
        self.alerts = alerts

    async def emit(self, decision: Decision) -> None:
        key = decision.evaluation.request_id.encode("utf-8")
        pending: list[Awaitable[Any]] = [
            await self.evaluations.send(key=key, value=encode(decision.evaluation))
        ]
        if decision.reflection is not None:
            pending.append(await self.reflections.send(key=key, value=encode(decision.reflection)))
        for alert in decision.alerts:
            pending.append(await self.alerts.send(key=key, value=encode(alert)))
        await asyncio.gather(*pending)


class RedisSink:
    """Latest evaluation per request under `tracejudge:evaluation:{request_id}`.

    Redis is a look-up convenience, not the system of record: failures are counted and logged
    (at most once a minute) and never stop the stream.
    """

    KEY = "tracejudge:evaluation:{request_id}"

    def __init__(self, client: aioredis.Redis | None, ttl_s: int) -> None:
        self.ttl_s = ttl_s
        self.errors = 0
        self._last_log = 0.0
        self._client = client

    @property
    def enabled(self) -> bool:
        return self._client is not None

    async def put(self, evaluation: Evaluation) -> bool:
        return await self.put_at(self.KEY.format(request_id=evaluation.request_id), evaluation)

    async def put_at(self, key: str, value: BaseModel) -> bool:
        if self._client is None:
            return False
        try:
            await self._client.set(key, value.model_dump_json(), ex=self.ttl_s)
            return True
        except (RedisError, OSError) as exc:
            self.errors += 1
            now = time.monotonic()
            if now - self._last_log > 60:
                self._last_log = now
                log.warning("redis write failed (%d so far): %r", self.errors, exc)
            return False
