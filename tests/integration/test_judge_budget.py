"""The judge's spend caps are shared by all judge processes through Redis, and a cached verdict
says it was cached, on the real Redis."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis

from tests.fake_llm import FakeLLM
from tests.realservices import free_port
from tests.test_judge_usage import answered, job
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.settings import Settings
from tracejudge.streams.judge.budget import BudgetLimits, SpendBudget
from tracejudge.streams.judge.stage import JudgeStage

pytestmark = pytest.mark.integration


async def test_two_processes_share_one_daily_token_budget(redis_url: str) -> None:
    client = aioredis.from_url(redis_url)
    prefix = f"tracejudge:test-{uuid.uuid4().hex[:6]}"
    limits = BudgetLimits(tokens_per_day=1_000)
    try:
        a, b = (SpendBudget(client, limits, prefix=prefix) for _ in range(2))
        await a.charge(600, None)
        assert await b.spent() is None
        await b.charge(600, None)  # neither alone reached the cap; together they did
        spent_a, spent_b = await a.spent(), await b.spent()
        assert spent_a is not None and spent_b is not None
        assert spent_a.note == "LLM judge: not judged: daily token budget spent"
        day_keys = [k async for k in client.scan_iter(f"{prefix}:budget:day:*")]
        assert len(day_keys) == 1 and 86_400 < await client.ttl(day_keys[0]) <= 2 * 86_400
    finally:
        await client.aclose()


async def test_redis_away_counts_the_process_alone() -> None:
    down = aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.2)
    budget = SpendBudget(down, BudgetLimits(tokens_per_minute=100))
    try:
        await budget.charge(60, None)
        assert await budget.spent() is None
        await budget.charge(60, None)
        spent = await budget.spent()
        assert spent is not None and spent.period == "minute"
        assert budget.redis_failures > 0
    finally:
        await down.aclose()


async def test_a_cached_verdict_says_so_and_costs_no_call(redis_url: str) -> None:
    client = aioredis.from_url(redis_url)
    with FakeLLM(lambda body, n: answered({"prompt_tokens": 50, "completion_tokens": 5})) as fake:
        settings = Settings(
            llm_base_url=fake.base_url,
            llm_model=f"judge-{uuid.uuid4().hex[:6]}",  # a cache key of its own
            llm_budget_tokens_per_day=10,  # spent by the first call: the cache still serves
        )
        stage = JudgeStage(settings, client, Policy(), "v")
        stage.budget = SpendBudget(
            client, stage.budget.limits, prefix=f"tracejudge:test-{uuid.uuid4().hex[:6]}"
        )
        try:
            first = (await stage.judged(job()))[0].evaluation
            again = (await stage.judged(job()))[0].evaluation
        finally:
            await stage.aclose()
            await client.aclose()
    assert fake.count() == 1
    assert first.judge is not None and not first.judge.cached and first.judge.attempts == 1
    assert again.judge_status == "ok" and again.judge is not None
    assert again.judge.cached and again.judge.attempts == 0 and again.judge.input_tokens is None
