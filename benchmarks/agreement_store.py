"""What outcomes cost the worker, and what Redis keeps per request.

    python -m benchmarks.agreement_store [--requests 2000] [--check]

On the real Redis the script starts (or TRACEJUDGE_REDIS_URL's): N final verdicts kept as the
publisher keeps them (concurrently: they share pipelines), then an outcome for each, taken one
at a time as the window agent takes them, then N more outcomes that come before their verdicts
(joined by `keep`). Per outcome joined: the worker's CPU (process time, the client's encoding
and parsing included) and the Redis round trips (packets the client sends). Per request:
MEMORY USAGE of its `kept:` key (what every request keeps, goal <= 256 bytes) and of its `out:`
and `pair:` keys (only requests with an outcome). The day bucket's cells are shared by all the
requests of a day with the same scores: their bytes are given per request over the run.
`--check` exits 1 when the kept key is over 256 bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from tests.realservices import start_redis
from tracejudge.judges.agreement.tally import Kept, Truth, View
from tracejudge.streams.agreement.store import PREFIX, RedisAgreementStore

GOAL_BYTES = 256
FINDINGS = ("unrecovered_failure", "says_work_remains", "claim_without_call", "tool_errors")
SENT = {"packets": 0}


def count_round_trips() -> None:
    """Every packet the client sends is one round trip (a pipeline is one packet)."""
    original = Connection.send_packed_command

    async def counted(self: Connection, command: Any, check_health: bool = True) -> None:
        SENT["packets"] += 1
        await original(self, command, check_health)

    Connection.send_packed_command = counted  # type: ignore[method-assign,assignment]


def a_kept(rng: random.Random) -> Kept:
    """A verdict as the worker keeps it: a named agent and version, a few findings; half of
    them judged (three views, the largest kept form)."""
    rules = View(rng.randint(20, 95), rng.random() < 0.3, rng.random() < 0.4)
    judged = rng.random() < 0.5
    judge = View(rng.randint(0, 100), rng.random() < 0.3, rng.random() < 0.4) if judged else None
    blend = View(rng.randint(0, 100), rng.random() < 0.3, rng.random() < 0.4) if judged else None
    return Kept(
        "customer-service-agent",
        "2.4.1",
        60,
        rules,
        judge,
        blend,
        tuple(rng.sample(FINDINGS, rng.randint(0, 3))),
        None,
        time.time(),
    )


async def usage(client: aioredis.Redis, keys: list[str]) -> list[int]:
    return [int(await client.memory_usage(k, samples=0) or 0) for k in keys]


async def measure(url: str, requests: int) -> dict[str, float]:
    count_round_trips()
    # the real key names (their length is part of the bytes kept), in a database of their own
    # when the Redis is a shared one; only this run's keys are deleted after
    client = aioredis.from_url(url.rsplit("/", 1)[0] + "/15")
    prefix = PREFIX
    store = RedisAgreementStore(client, 7 * 86400, prefix=prefix)
    rng = random.Random(39)
    rids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(2 * requests)]
    kepts = {rid: a_kept(rng) for rid in rids}
    truths = {rid: Truth(rng.random() < 0.6, "test") for rid in rids}
    late, early = rids[:requests], rids[requests:]
    buckets: list[str] = []
    try:
        if await client.dbsize():
            raise SystemExit("database 15 is not empty: the tally would mix with its data")
        # verdicts, as the publisher keeps them: concurrently (one pipeline per batch)
        packets, cpu = SENT["packets"], time.process_time()
        await asyncio.gather(*(store.keep(rid, kepts[rid]) for rid in late))
        keep_cpu = (time.process_time() - cpu) / requests
        keep_trips = (SENT["packets"] - packets) / requests
        # their outcomes, one at a time as the window agent takes them
        packets, cpu, wall = SENT["packets"], time.process_time(), time.perf_counter()
        results = [await store.outcome(rid, truths[rid], time.time()) for rid in late]
        join_cpu = (time.process_time() - cpu) / requests
        join_wall = (time.perf_counter() - wall) / requests
        join_trips = (SENT["packets"] - packets) / requests
        assert set(results) == {"joined"}, set(results)
        # outcomes before their verdicts: stored, then joined by `keep`
        packets, cpu = SENT["packets"], time.process_time()
        for rid in early:
            await store.outcome(rid, truths[rid], time.time())
        await asyncio.gather(*(store.keep(rid, kepts[rid]) for rid in early))
        early_cpu = (time.process_time() - cpu) / requests
        early_trips = (SENT["packets"] - packets) / requests
        tally = await store.tally()
        pairs = sum(n for c, n in tally.counts.items() if c.view == "rules")
        assert pairs == 2 * requests, pairs
        sample = rng.sample(late, min(200, requests))
        kept_b = await usage(client, [f"{prefix}kept:{r}" for r in sample])
        plain = [b for r, b in zip(sample, kept_b, strict=True) if not kepts[r].judged]
        judged = [b for r, b in zip(sample, kept_b, strict=True) if kepts[r].judged]
        out_b = await usage(client, [f"{prefix}out:{r}" for r in sample])
        pair_b = await usage(client, [f"{prefix}pair:{r}:test" for r in sample])
        buckets = [k.decode() async for k in client.scan_iter(match=f"{prefix}tally:*")]
        bucket_b = sum(await usage(client, buckets))
    finally:
        for rid in rids:
            await client.delete(
                f"{prefix}kept:{rid}", f"{prefix}out:{rid}", f"{prefix}pair:{rid}:test"
            )
        for bucket in buckets:
            await client.delete(bucket)
        await client.aclose()
    return {
        "keep_cpu_us": keep_cpu * 1e6,
        "keep_round_trips": keep_trips,
        "join_cpu_us": join_cpu * 1e6,
        "join_wall_us": join_wall * 1e6,
        "join_round_trips": join_trips,
        "early_then_keep_cpu_us": early_cpu * 1e6,
        "early_then_keep_round_trips": early_trips,
        "kept_bytes_plain_median": statistics.median(plain),
        "kept_bytes_judged_median": statistics.median(judged),
        "kept_bytes_max": max(kept_b),
        "out_bytes_median": statistics.median(out_b),
        "pair_bytes_median": statistics.median(pair_b),
        "tally_bytes_per_request": bucket_b / (2 * requests),
        "tally_cells": len(tally.counts),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--check", action="store_true", help="exit 1 over the byte goal")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-agreement-"))
    redis = start_redis(workdir / "redis")
    try:
        figures = asyncio.run(measure(redis.address, args.requests))
    finally:
        redis.stop()
    width = max(len(k) for k in figures)
    for name, value in figures.items():
        print(f"{name:<{width}}  {value:10.3f}")
    over = figures["kept_bytes_max"] > GOAL_BYTES
    print(f"kept per request: max {figures['kept_bytes_max']:.0f} B (goal <= {GOAL_BYTES} B)")
    return 1 if args.check and over else 0


if __name__ == "__main__":
    sys.exit(main())
