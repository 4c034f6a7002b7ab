"""The agreement store on the real Redis: the memory twin's cases, and what only Redis does
(expiry, a pair script run by two clients at once, Redis down)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator

import pytest
import redis.asyncio as aioredis

from tests import agreement_cases as cases
from tests.realservices import free_port
from tracejudge.judges.agreement.tally import Truth
from tracejudge.streams.agreement.store import (
    PREFIX,
    AgreementUnavailable,
    MemoryAgreementStore,
    RedisAgreementStore,
)

pytestmark = pytest.mark.integration
RETENTION_S = 3 * 86400 + 600


@pytest.fixture
def redis(redis_url: str) -> Iterator[aioredis.Redis]:
    # a client per test, made outside any loop: it connects in the test's own
    client = aioredis.from_url(redis_url, single_connection_client=False)
    yield client


def store_of(client: aioredis.Redis, prefix: str) -> RedisAgreementStore:
    return RedisAgreementStore(client, RETENTION_S, prefix=prefix)


@pytest.mark.parametrize(
    "case",
    [
        cases.verdict_then_outcomes,
        cases.outcome_before_verdict,
        cases.races_and_redeliveries,
        cases.day_buckets,
    ],
)
async def test_redis_store(
    redis: aioredis.Redis, case: Callable[[object], Awaitable[None]]
) -> None:
    await case(store_of(redis, f"{PREFIX}it-{uuid.uuid4().hex[:8]}:"))


async def test_two_processes_racing_count_each_pair_once(redis_url: str) -> None:
    """A verdict kept by the judge process while the worker takes its outcome: two clients,
    two connections, the same keys."""
    prefix = f"{PREFIX}it-{uuid.uuid4().hex[:8]}:"
    judge, worker = aioredis.from_url(redis_url), aioredis.from_url(redis_url)
    try:
        a, b = store_of(judge, prefix), store_of(worker, prefix)
        rids = [f"race-{i}" for i in range(300)]
        await asyncio.gather(
            *(a.keep(rid, cases.JUDGED) for rid in rids),
            *(b.outcome(rid, Truth(i % 3 == 0, "test"), cases.NOW) for i, rid in enumerate(rids)),
        )
        want = cases.expected(*((cases.JUDGED, Truth(i % 3 == 0, "test")) for i in range(300)))
        assert (await a.tally()).counts == want.counts
        assert (await b.tally()).counts == want.counts
    finally:
        await judge.aclose()
        await worker.aclose()


async def test_every_key_expires_with_the_retention(redis: aioredis.Redis) -> None:
    prefix = f"{PREFIX}it-{uuid.uuid4().hex[:8]}:"
    store = store_of(redis, prefix)
    await store.keep("t1", cases.JUDGED)
    await store.outcome("t1", Truth(False, "human"), cases.NOW)
    keys = sorted([k.decode() async for k in redis.scan_iter(match=prefix + "*")])
    kinds = [k[len(prefix) :].split(":")[0] for k in keys]
    assert kinds == ["kept", "out", "pair", "run", "tally"]
    for key in keys:
        ttl = await redis.ttl(key)
        limit = RETENTION_S + (86400 if ":tally:" in key else 0)
        assert limit - 5 <= ttl <= limit, key
    pair = json.loads(await redis.get(prefix + "pair:t1:human") or b"null")
    assert pair[0] == time.strftime("%Y-%m-%d", time.gmtime(cases.NOW)) and len(pair[1]) == 3
    run = json.loads(await redis.get(prefix + "run:t1") or b"null")
    assert run[0] == pair[0] and len(run[1]) == 1  # the request's one run cell, the same day


async def test_redis_down_never_stops_a_verdict_and_says_so_for_an_outcome() -> None:
    down = aioredis.from_url(
        f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5, socket_connect_timeout=0.5
    )
    store = RedisAgreementStore(down, RETENTION_S)
    try:
        await asyncio.wait_for(store.keep("x", cases.PLAIN), 5)  # returns, does not raise
        assert store.errors == 1
        with pytest.raises(AgreementUnavailable):
            await store.outcome("x", Truth(True, "user"), cases.NOW)
        with pytest.raises(AgreementUnavailable):
            await store.tally()
    finally:
        await down.aclose()


async def test_the_memory_twin_agrees_with_redis(redis: aioredis.Redis) -> None:
    memory, live = MemoryAgreementStore(), store_of(redis, f"{PREFIX}it-{uuid.uuid4().hex[:8]}:")
    for store in (memory, live):
        await cases.races_and_redeliveries(store, runs=60)
    assert (await memory.tally()).counts == (await live.tally()).counts


async def test_evaluations_and_kept_verdicts_queued_together_share_one_round_trip(
    redis: aioredis.Redis,
) -> None:
    """The worker writes an evaluation and keeps its verdict for every request: queued in the
    same turn of the loop, a hundred requests' writes go in one pipeline, each caller gets its
    own replies, and an outcome already in is still joined."""
    from tracejudge.streams.shared.outputs import RedisSink

    prefix = f"{PREFIX}it-{uuid.uuid4().hex[:8]}:"
    store, sink = store_of(redis, prefix), RedisSink(redis, 600)
    rids = [f"rid-{i}" for i in range(100)]
    truth = Truth(False, "labels")
    assert await store.outcome(rids[0], truth, cases.NOW) == "early"
    pipelines = 0
    make = redis.pipeline

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal pipelines
        pipelines += 1
        return make(*args, **kwargs)  # type: ignore[arg-type]

    redis.pipeline = counted  # type: ignore[method-assign,assignment]
    try:
        results = await asyncio.gather(
            *(sink.put_encoded(f"{prefix}evaluation:{rid}", rid.encode()) for rid in rids),
            *(store.keep(rid, cases.PLAIN) for rid in rids),
        )
    finally:
        redis.pipeline = make  # type: ignore[method-assign]
    assert results[:100] == [True] * 100 and sink.errors == 0 and store.errors == 0
    # one for all the writes, one for the pair of the outcome that came first
    assert pipelines == 2
    assert await redis.get(f"{prefix}evaluation:{rids[7]}") == b"rid-7"
    assert (await store.tally()).counts == cases.expected((cases.PLAIN, truth)).counts
