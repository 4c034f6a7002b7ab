"""The judge's spend caps: tokens and USD per minute and per day, shared by all judge processes
through Redis the way the request limit is (`rate_limit.py`).

A cap is checked before a call and charged with what the server reported after it, so calls
already in flight when a cap is reached may pass it by their own size (at most
TRACEJUDGE_LLM_CONCURRENCY calls a process). Periods are UTC minutes and days. While Redis is
away each process counts its own spend against the whole cap (a cap per process, not shared;
logged once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tracejudge.models.names import REDIS_LLM_PREFIX

log = logging.getLogger(__name__)

Period = Literal["minute", "day"]
SECONDS: dict[Period, int] = {"minute": 60, "day": 86_400}
WORDS: dict[Period, str] = {"minute": "per-minute", "day": "daily"}


@dataclass(frozen=True)
class BudgetLimits:
    """0: no cap."""

    tokens_per_minute: int = 0
    tokens_per_day: int = 0
    usd_per_minute: float = 0.0
    usd_per_day: float = 0.0

    def caps(self, period: Period) -> tuple[int, float]:
        if period == "minute":
            return self.tokens_per_minute, self.usd_per_minute
        return self.tokens_per_day, self.usd_per_day


@dataclass(frozen=True)
class Spent:
    """A cap reached: which period and which unit, for the evaluation's reasons."""

    period: Period
    unit: Literal["token", "spend"]

    @property
    def note(self) -> str:
        return f"LLM judge: not judged: {WORDS[self.period]} {self.unit} budget spent"


class SpendBudget:
    def __init__(
        self,
        client: aioredis.Redis | None,
        limits: BudgetLimits,
        prefix: str = REDIS_LLM_PREFIX,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self.limits = limits
        self._key = prefix + ":budget:{period}:{index}"
        self._clock = clock
        # this process's own spend per (period, index): the count while Redis is away
        self._local: dict[tuple[Period, int], tuple[int, float]] = {}
        self.redis_failures = 0

    def _periods(self) -> list[tuple[Period, int]]:
        now = self._clock()
        return [(p, int(now // SECONDS[p])) for p in ("minute", "day") if any(self.limits.caps(p))]

    async def spent(self) -> Spent | None:
        """The first cap reached, or None while every cap has room."""
        periods = self._periods()
        if not periods:
            return None
        totals = await self._shared(periods)
        for (period, _), (tokens, usd) in zip(periods, totals, strict=True):
            token_cap, usd_cap = self.limits.caps(period)
            if token_cap and tokens >= token_cap:
                return Spent(period, "token")
            if usd_cap and usd >= usd_cap:
                return Spent(period, "spend")
        return None

    async def charge(self, tokens: int, usd: float | None) -> None:
        """What one judgement cost, added to every period with a cap."""
        periods = self._periods()
        if not periods or (tokens <= 0 and not usd):
            return
        for period, index in periods:
            had_tokens, had_usd = self._local.get((period, index), (0, 0.0))
            self._local[(period, index)] = (had_tokens + tokens, had_usd + (usd or 0.0))
        self._prune(periods)
        if self._client is None:
            return
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                for period, index in periods:
                    key = self._key.format(period=period, index=index)
                    pipe.hincrby(key, "tokens", tokens)
                    if usd:
                        pipe.hincrbyfloat(key, "usd", usd)
                    pipe.expire(key, 2 * SECONDS[period])
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self._failed(exc)

    async def _shared(self, periods: list[tuple[Period, int]]) -> list[tuple[int, float]]:
        local = [self._local.get(p, (0, 0.0)) for p in periods]
        if self._client is None:
            return local
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for period, index in periods:
                    pipe.hmget(self._key.format(period=period, index=index), "tokens", "usd")
                rows = await pipe.execute()
        except (RedisError, OSError) as exc:
            self._failed(exc)
            return local
        return [(int(tokens or 0), float(usd or 0.0)) for tokens, usd in rows]

    def _failed(self, exc: BaseException) -> None:
        self.redis_failures += 1
        if self.redis_failures == 1 or self.redis_failures % 100 == 0:
            log.warning("judge budget via Redis failed, counting this process alone: %r", exc)

    def _prune(self, current: list[tuple[Period, int]]) -> None:
        keep = set(current)
        for key in [k for k in self._local if k not in keep]:
            del self._local[key]
