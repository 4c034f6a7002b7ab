"""The judge's request budget is shared by all workers through Redis, with a fair share
fallback when Redis is away."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis

from tests.fake_llm import tool_call_reply, verdict
from tests.realservices import free_port
from tracejudge.streams.judge.cache import JudgeCache
from tracejudge.streams.judge.rate_limit import SharedRateLimiter

pytestmark = pytest.mark.integration


async def test_two_workers_share_one_budget(redis_url: str) -> None:
    client = aioredis.from_url(redis_url)
    prefix = uuid.uuid4().hex[:6]
    try:
        a, b = (
            SharedRateLimiter(client, rpm=6, prefix=f"tracejudge:test-{prefix}") for _ in range(2)
        )
        loop = asyncio.get_running_loop()
        grants = [await (a if i % 2 else b).acquire(loop.time() + 0.2) for i in range(10)]
        # a minute boundary may fall inside the test: then the budget is counted afresh
        assert sum(grants) in (6, 10) and grants[:6] == [True] * 6
        assert a.workers_seen == 2 or b.workers_seen == 2
    finally:
        await client.aclose()


async def test_redis_down_falls_back_to_a_fair_share() -> None:
    down = aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.2)
    limiter = SharedRateLimiter(down, rpm=10)
    limiter.workers_seen = 2  # as last seen while Redis was up
    loop = asyncio.get_running_loop()
    grants = [await limiter.acquire(loop.time() + 0.1) for _ in range(8)]
    assert grants == [True] * 5 + [False] * 3
    assert limiter.redis_failures > 0
    await down.aclose()


async def test_verdict_cache_round_trip_and_survives_redis_down(redis_url: str) -> None:
    from tracejudge.judges.llm.answer import parse_answer

    answer = parse_answer(tool_call_reply(verdict(True, True, 77)).body)
    client = aioredis.from_url(redis_url)
    cache = JudgeCache(client, ttl_s=60)
    key = f"tracejudge:judgecache:test-{uuid.uuid4().hex}"
    assert await cache.get(key) is None
    await cache.put(key, answer)
    assert await cache.get(key) == answer
    assert 0 < await client.ttl(key) <= 60
    await client.aclose()
    down = JudgeCache(aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0"), ttl_s=60)
    assert await down.get(key) is None and down.errors == 1
