"""The chain and the action figures on the real Redis: a follow-up joined to a parent kept by
another process, each follow-up counted once, Redis down never stops a verdict."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from tests.memory import memory_worker
from tests.realservices import free_port
from tests.test_actions import PARENT, follow_up, run
from tracejudge.judges.agreement.tally import Kept, Truth, View
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.judges.verdict.make import Closing, Judging, make_verdict
from tracejudge.streams.agreement.store import (
    PREFIX,
    AgreementUnavailable,
    MemoryAgreementStore,
    RedisAgreementStore,
)
from tracejudge.streams.demo.samples import sample_traces

pytestmark = pytest.mark.integration
RETENTION_S = 3 * 86400


@pytest.fixture
def redis(redis_url: str) -> Iterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    yield client


def store_of(client: aioredis.Redis, prefix: str) -> RedisAgreementStore:
    return RedisAgreementStore(client, RETENTION_S, prefix=prefix)


async def test_a_follow_up_on_another_worker_meets_its_parents_verdict(
    redis_url: str,
) -> None:
    """The parent judged by one worker, its follow-up by another (two clients, one Redis); the
    follow-up published again after a crash counts once; the memory twin counts the same."""
    prefix = f"{PREFIX}it-{uuid.uuid4().hex[:8]}:"
    one, two = aioredis.from_url(redis_url), aioredis.from_url(redis_url)
    try:
        a, b = store_of(one, prefix), store_of(two, prefix)
        # the clocks of today: the tally reads the day buckets of the retention
        first = memory_worker(agreement=a)
        first.clock.now = now = time.time()
        parent = await run(first, sample_traces("run")[1].events)
        assert parent.incomplete and parent.chain_final is False
        w = memory_worker(agreement=b)
        w.clock.now = now + 120
        child = await run(w, follow_up(PARENT, 1, complete=True, rid="run:r1"))
        assert child.origin is not None and child.origin.found
        assert (child.origin.overall_score, child.origin.incomplete) == (parent.overall_score, True)
        assert child.chain_final is True and child.reflection_round == 1

        judging = Judging(tool_call_budget=20, policy=Policy(), version="v-test", llm=None)
        records = [json.dumps(e).encode() for e in follow_up(PARENT, 1, True, "run:r1")]
        made = make_verdict(
            judging, Closing("run:r1", "final_response", records, 5, 0, [], now + 120, None)
        )
        await w.ctx.publisher.publish(made)  # delivered again: the same counts
        await w.ctx.publisher.publish(made)

        (f,) = (await a.action_tally()).figures().values()
        assert (f.asked, f.followed_up, f.late, f.success, f.complete, f.fixed) == (
            1,
            1,
            0,
            1,
            1,
            1,
        )
        assert f.mean_seconds == 120.0
        assert f.mean_score_change == child.overall_score - parent.overall_score

        twin = MemoryAgreementStore()
        w1 = memory_worker(agreement=twin)
        w1.clock.now = now
        await run(w1, sample_traces("run")[1].events)
        w2 = memory_worker(agreement=twin)
        w2.clock.now = now + 120
        await run(w2, follow_up(PARENT, 1, complete=True, rid="run:r1"))
        assert (await twin.action_tally()).figures() == (await b.action_tally()).figures()

        keys = sorted(
            [k.decode()[len(prefix) :] async for k in one.scan_iter(match=prefix + "act*")]
        )
        assert [k.rsplit(":", 1)[0] if k.startswith("act:") else k.split(":")[0] for k in keys] == [
            "act:asked:run",
            "act:follow:run",
            "actions",
        ]
        for key in keys:
            assert 0 < await one.ttl(prefix + key) <= RETENTION_S + 86400
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_replaced_verdict_takes_its_counts_back(redis: aioredis.Redis) -> None:
    store = store_of(redis, f"{PREFIX}it-{uuid.uuid4().hex[:8]}:")
    cell = "bot\x1freflection_1\x1f"
    first = [(cell + "followed_up", 1), (cell + "score_change", -5)]
    now = time.time()
    assert await store.count_action("follow", "r", now, first) == "joined"
    assert await store.count_action("follow", "r", now, first) == "same"
    second = [(cell + "followed_up", 1), (cell + "fixed", 1), (cell + "score_change", 20)]
    assert await store.count_action("follow", "r", now, second) == "replaced"
    counts = {tuple(c): n for c, n in (await store.action_tally()).counts.items()}
    assert counts == {
        ("bot", "reflection_1", "followed_up"): 1,
        ("bot", "reflection_1", "fixed"): 1,
        ("bot", "reflection_1", "score_change"): 20,
    }


async def test_redis_down_the_follow_up_is_published_without_its_origin() -> None:
    down = aioredis.from_url(
        f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5, socket_connect_timeout=0.5
    )
    store = RedisAgreementStore(down, RETENTION_S)
    try:
        child = await run(memory_worker(agreement=store), follow_up(PARENT, 1, True, "run:r1"))
        assert child.origin is not None and not child.origin.found
        assert await store.kept_of(PARENT) is None and store.errors >= 1
        with pytest.raises(AgreementUnavailable):
            await store.action_tally()
    finally:
        await down.aclose()


async def test_a_steered_runs_outcomes_meet_its_steers_in_either_order(
    redis: aioredis.Redis,
) -> None:
    """On the real Redis as in memory: an outcome before the verdict and one after, each
    counted once for each steer the kept verdict names; a changed outcome replaces its count."""
    prefix = f"{PREFIX}it-{uuid.uuid4().hex[:8]}:"
    now = time.time()
    kept = Kept("bot", None, 60, View(80, False, False), ts=now, steered=("repeated_call",) * 2)
    twin = MemoryAgreementStore()
    for store in (store_of(redis, prefix), twin):
        await store.outcome("early", Truth(False, "test"), now)
        await store.keep("early", kept)
        await store.keep("early", kept)  # published again
        await store.keep("late", kept)
        await store.outcome("late", Truth(True, "test"), now)
        await store.outcome("late", Truth(True, "test"), now + 5)  # the same again
        await store.outcome("late", Truth(True, "review"), now)
        await store.outcome("early", Truth(True, "review"), now)
        await store.outcome("early", Truth(True, "review"), now)
        await store.outcome("early", Truth(True, "test"), now)  # replaces its failed one
        f = (await store.action_tally()).steer_figures()[("bot", "repeated_call")]
        assert (f.outcome_ok, f.outcome_failed, f.sent) == (8, 0, 0)
    counts = (await store_of(redis, prefix).action_tally()).counts
    assert counts == (await twin.action_tally()).counts
