"""The rate limits of LLM calls, requests and tokens per minute, shared by all workers through
Redis."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tracejudge.judges.llm.limit import TokenReservation as Reservation
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
        self.workers_seen = await _heartbeat(self._client, self._workers, self.worker_id, now)

    def fair_share(self) -> int:
        return max(1, self.rpm // self.workers_seen)

    def _local_try(self, now: float) -> tuple[bool, float]:
        while self._local and self._local[0] <= now - 60:
            self._local.popleft()
        if len(self._local) < self.fair_share():
            self._local.append(now)
            return True, 0.0
        return False, self._local[0] + 60 - now + 0.01


async def _heartbeat(client: aioredis.Redis, key: str, worker_id: str, now: float) -> int:
    """This worker seen now; how many were seen in the last 30 s (itself included)."""
    async with client.pipeline(transaction=True) as pipe:
        pipe.zadd(key, {worker_id: now})
        pipe.zremrangebyscore(key, 0, now - 30)
        pipe.zcard(key)
        *_, count = await pipe.execute()
    return max(1, int(count))


# Atomically: take ARGV[1] tokens from the minute's count KEYS[1] if they fit under ARGV[2], or
# if nothing was taken this minute (a call larger than the whole limit goes alone, or never).
# An INCRBY then DECRBY on refusal would let a refused call's tokens make other workers wait.
_RESERVE = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if used == 0 or used + want <= tonumber(ARGV[2]) then
  redis.call('INCRBY', KEYS[1], want)
  redis.call('EXPIRE', KEYS[1], 120)
  return 1
end
return 0
"""


class SharedTokenLimiter:
    """A per-minute token budget (TRACEJUDGE_LLM_TPM) shared through Redis, beside the request
    budget: a call reserves its estimated tokens (input estimate plus the answer's reserve)
    before it goes out, and `settle` corrects the reservation to what the server reported, so
    each minute's count is what was spent in it. Counted per UTC minute, as the request limit;
    while Redis is down, each worker keeps to its fair share (tpm / workers last seen)."""

    def __init__(
        self,
        client: aioredis.Redis | None,
        tpm: int,
        prefix: str = REDIS_LLM_PREFIX,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._clock = clock
        self._counter = prefix + ":tpm:{minute}"
        self._workers = prefix + ":tpm-workers"
        self.tpm = tpm
        self.worker_id = uuid.uuid4().hex[:12]
        self.workers_seen = 1
        self._heartbeat_at = 0.0
        self._local: dict[int, int] = {}  # minute -> tokens this process counted locally
        self._script = client.register_script(_RESERVE) if client is not None else None
        self.redis_failures = 0
        self.waits = 0  # times a call waited for the next minute's tokens

    async def reserve(self, tokens: int, deadline: float) -> Reservation | None:
        """Take `tokens` from the minute's budget, waiting for the next minute while it is
        spent; None when no room comes before `deadline` (monotonic). A call asking for more
        than the whole limit asks for the limit: it then goes alone in its minute."""
        if self.tpm <= 0:
            return Reservation(0, 0, shared=False)
        tokens = min(max(1, tokens), self.tpm)
        loop = asyncio.get_running_loop()
        while True:
            now = self._clock()
            minute = int(now // 60)
            shared = await self._shared_try(minute, tokens, now)
            # Redis away: a fair share, counted here
            granted = self._local_try(minute, tokens) if shared is None else shared
            if granted:
                return Reservation(minute, tokens, shared=shared is not None)
            wait_s = 60.0 - now % 60 + 0.01
            if loop.time() + wait_s >= deadline:
                return None
            self.waits += 1
            await asyncio.sleep(wait_s)

    async def settle(self, reservation: Reservation, spent: int) -> None:
        """Correct a reservation to the tokens the call really spent (0: it was never billed,
        e.g. refused before the model ran)."""
        delta = spent - reservation.tokens
        if delta == 0 or self.tpm <= 0:
            return
        if not reservation.shared:
            if reservation.minute in self._local:
                self._local[reservation.minute] = max(0, self._local[reservation.minute] + delta)
            return
        if self._client is None:  # cannot be: a shared reservation was taken in Redis
            return
        key = self._counter.format(minute=reservation.minute)
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.incrby(key, delta)
                pipe.expire(key, 120)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self._failed(exc)

    async def _shared_try(self, minute: int, tokens: int, now: float) -> bool | None:
        if self._client is None or self._script is None:
            return None
        try:
            if now - self._heartbeat_at >= 10:
                self._heartbeat_at = now
                self.workers_seen = await _heartbeat(
                    self._client, self._workers, self.worker_id, now
                )
            key = self._counter.format(minute=minute)
            return bool(await self._script(keys=[key], args=[tokens, self.tpm]))
        except (RedisError, OSError) as exc:
            self._failed(exc)
            return None

    def fair_share(self) -> int:
        return max(1, self.tpm // self.workers_seen)

    def _local_try(self, minute: int, tokens: int) -> bool:
        for old in [m for m in self._local if m != minute]:
            del self._local[old]
        used = self._local.get(minute, 0)
        share = self.fair_share()
        if used == 0 or used + tokens <= share:
            self._local[minute] = used + tokens
            return True
        return False

    def _failed(self, exc: BaseException) -> None:
        self.redis_failures += 1
        if self.redis_failures == 1 or self.redis_failures % 100 == 0:
            log.warning("token limit via Redis failed, using a fair share: %r", exc)
