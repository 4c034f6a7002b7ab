"""The rate limit of LLM calls, shared by all workers through Redis."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tracejudge.models.names import REDIS_LLM_PREFIX

log = logging.getLogger(__name__)


class SharedRateLimiter:
    """A per-minute request budget shared through Redis.

    Each worker also keeps a heartbeat in a sorted set, so it knows how many workers share the
    budget; while Redis is down it falls back to its fair share (rpm / workers last seen),
    counted locally over a sliding minute.
    """

    def __init__(
        self, client: aioredis.Redis | None, rpm: int, prefix: str = REDIS_LLM_PREFIX
    ) -> None:
        self._client = client
        self._counter = prefix + ":rpm:{minute}"
        self._workers = prefix + ":workers"
        self.rpm = rpm
        self.worker_id = uuid.uuid4().hex[:12]
        self.workers_seen = 1
        self._heartbeat_at = 0.0
        self._local: deque[float] = deque()
        self.redis_failures = 0
        self.waits = 0  # times a call waited for the limit (tracejudge_judge_rate_limit_waits)

    async def acquire(self, deadline: float) -> bool:
        if self.rpm <= 0:
            return True
        loop = asyncio.get_running_loop()
        while True:
            granted, wait_s = await self._try_once()
            if granted:
                return True
            if loop.time() + wait_s >= deadline:
                return False
            self.waits += 1
            await asyncio.sleep(wait_s)

    async def _try_once(self) -> tuple[bool, float]:
        now = time.time()
        if self._client is not None:
            try:
                await self._heartbeat(now)
                minute = int(now // 60)
                key = self._counter.format(minute=minute)
                async with self._client.pipeline(transaction=True) as pipe:
                    pipe.incr(key)
                    pipe.expire(key, 120)
                    count, _ = await pipe.execute()
                if int(count) <= self.rpm:
                    return True, 0.0
                return False, 60.0 - now % 60 + 0.01
            except (RedisError, OSError) as exc:
                self.redis_failures += 1
                if self.redis_failures == 1 or self.redis_failures % 100 == 0:
                    log.warning("rate limit via Redis failed, using a fair share: %r", exc)
        return self._local_try(time.monotonic())

    async def _heartbeat(self, now: float) -> None:
        if self._client is None or now - self._heartbeat_at < 10:
            return
        self._heartbeat_at = now
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.zadd(self._workers, {self.worker_id: now})
            pipe.zremrangebyscore(self._workers, 0, now - 30)
            pipe.zcard(self._workers)
            *_, count = await pipe.execute()
        self.workers_seen = max(1, int(count))

    def fair_share(self) -> int:
        return max(1, self.rpm // self.workers_seen)

    def _local_try(self, now: float) -> tuple[bool, float]:
        while self._local and self._local[0] <= now - 60:
            self._local.popleft()
        if len(self._local) < self.fair_share():
            self._local.append(now)
            return True, 0.0
        return False, self._local[0] + 60 - now + 0.01
