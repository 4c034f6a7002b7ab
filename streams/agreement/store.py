"""Where a final verdict and the outcomes of its request meet, and the tally their pairs make.

Redis (`RedisAgreementStore`), because it is shared by every worker and `tracejudge judge`
process (a verdict kept by the judge process, its outcome handled by the worker owning the
partition), survives a worker's kill -9 and a move of its partitions, expires by TTL (the
retention, TRACEJUDGE_AGREEMENT_RETENTION_S), and runs a pair's update as one atomic script.

Keys (prefix `tracejudge:agreement:`):
- `kept:{rid}`: the final verdict's `Kept.encode()`;
- `out:{rid}`: hash outcome source -> "{ok}|{at}" (1 or 0, then the outcome's time);
- `pair:{rid}:{source}`: JSON `[day, [cell keys]]`, what that pair counts and in which bucket;
- `run:{rid}`: the same for the request's run cell (`tally.run_cell`), counted once whatever
  number of sources its outcomes come from, in the bucket of the pair counted last;
- `tally:{utc day}`: hash cell key -> count, the pairs whose outcome came that day; a bucket
  lives the retention plus a day.

The effect of actions (judges/agreement/action_effects.py) lives beside it, because a follow-up is
joined to its parent's kept verdict (the parent may have been judged by another process):
- `act:{what}:{rid}`: JSON `[day, [[field, amount], ...]]`, what a request counted as asked
  (`what` = asked) or as a follow-up (`follow`), so a verdict published again counts once;
  `act:steer_outcome:{source}:{rid}`: what an outcome of a steered run counted for its steers,
  joined where the outcome and the kept verdict meet (either comes second);
- `actions:{utc day}`: hash `agent \x1f action \x1f field` -> count or sum.

`keep` writes the kept verdict then reads the request's outcomes; `outcome` writes the outcome
then reads the kept verdict. Redis runs commands one at a time, so whichever of the two comes
second sees the other and joins them; both may (a race, or a record delivered again), and the
pair script makes a join done twice count once: a pair equal to the stored one changes
nothing, another one takes the stored one's cells back before counting its own.

`MemoryAgreementStore` has the same semantics in a process (replay, the tests).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from tracejudge.judges.agreement.action_effects import ActionTally, Amounts, steer_outcomes
from tracejudge.judges.agreement.tally import Cell, Kept, Tally, Truth, cells, run_cell
from tracejudge.streams.shared.redis_batch import batch_of

log = logging.getLogger(__name__)

PREFIX = "tracejudge:agreement:"
DAY_S = 86400
Result = Literal["joined", "same", "replaced", "early"]


class AgreementStore(Protocol):
    async def keep(self, request_id: str, kept: Kept) -> None:
        """At a final verdict's publish: kept for its outcomes, joined to those already in."""
        ...

    async def outcome(self, request_id: str, truth: Truth, at: float) -> Result:
        """An outcome of a request: "joined" to its verdict, the "same" as the one already
        counted, "replaced" another of the same source, or "early" (no verdict yet: kept, and
        joined when the verdict comes)."""
        ...

    async def tally(self, since: float | None = None) -> Tally:
        """Every pair counted since `since` (None: within the retention)."""
        ...

    async def kept_of(self, request_id: str) -> Kept | None:
        """A request's kept verdict; None when there is none (or the store failed: counted)."""
        ...

    async def count_action(self, what: str, request_id: str, at: float, amounts: Amounts) -> Result:
        """Count what a request did for the actions' figures (`what`: asked, follow), once:
        the same amounts again change nothing, others replace them."""
        ...

    async def action_tally(self, since: float | None = None) -> ActionTally:
        """Every action counted since `since` (None: within the retention)."""
        ...


class AgreementUnavailable(Exception):
    """The store could not be read or written (Redis down, a timeout)."""


def day_of(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


def out_value(truth: Truth, at: float) -> str:
    """An outcome as stored: its verdict first, so that the same one told again compares
    equal on its first character whatever its time."""
    return f"{int(truth.ok)}|{at:.1f}"


def pair_of(kept: Kept, source: str, value: str) -> tuple[str, list[str], str]:
    """What a stored outcome and a kept verdict count: the day bucket, the cell keys, and the
    pair as stored (`pair:` key)."""
    ok, _, at = value.partition("|")
    day = day_of(float(at))
    keys = [c.key() for c in cells(kept, Truth(ok == "1", source))]
    return day, keys, json.dumps([day, keys], separators=(",", ":"), ensure_ascii=False)


def run_of(kept: Kept, day: str) -> tuple[str, list[str], str]:
    """What a request with outcomes counts as a run (`run:` key), in the bucket of `day`."""
    keys = [run_cell(kept).key()]
    return day, keys, json.dumps([day, keys], separators=(",", ":"), ensure_ascii=False)


# A pair's update, atomic. KEYS[1] pair key; ARGV: the new pair as stored, the pair's TTL, a
# bucket's TTL, the bucket key prefix, the new day, then the new cell keys.
# Returns 0: the same pair (nothing changes), 1: a new pair, 2: it replaced another.
PAIR_SCRIPT = """
local old = redis.call('GET', KEYS[1])
if old == ARGV[1] then return 0 end
if old then
  local o = cjson.decode(old)
  local bucket = ARGV[4] .. o[1]
  if redis.call('EXISTS', bucket) == 1 then
    for _, c in ipairs(o[2]) do
      if redis.call('HINCRBY', bucket, c, -1) <= 0 then redis.call('HDEL', bucket, c) end
    end
  end
end
local bucket = ARGV[4] .. ARGV[5]
for i = 6, #ARGV do redis.call('HINCRBY', bucket, ARGV[i], 1) end
redis.call('EXPIRE', bucket, ARGV[3])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
if old then return 2 end
return 1
"""

# An outcome in, atomic. KEYS[1] out hash, KEYS[2] kept key; ARGV: source, value, TTL.
# The same verdict told again keeps the first one's time (and so its day bucket).
# Returns {the previous value, the value stored, the kept verdict}.
OUTCOME_SCRIPT = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local stored = ARGV[2]
if old and string.sub(old, 1, 1) == string.sub(ARGV[2], 1, 1) then
  stored = old
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {old or false, stored, redis.call('GET', KEYS[2]) or false}
"""

# An action's counts, atomic: PAIR_SCRIPT with amounts. KEYS[1] act key; ARGV: the counts as
# stored, the act key's TTL, a bucket's TTL, the bucket key prefix, the day, then field and
# amount pairs. Returns as PAIR_SCRIPT does. A sum may pass through 0 and go on (a score
# change): a field is deleted only when taking back leaves it at exactly 0.
ACTION_SCRIPT = """
local old = redis.call('GET', KEYS[1])
if old == ARGV[1] then return 0 end
if old then
  local o = cjson.decode(old)
  local bucket = ARGV[4] .. o[1]
  if redis.call('EXISTS', bucket) == 1 then
    for _, c in ipairs(o[2]) do
      if redis.call('HINCRBY', bucket, c[1], -c[2]) == 0 then redis.call('HDEL', bucket, c[1]) end
    end
  end
end
local bucket = ARGV[4] .. ARGV[5]
for i = 6, #ARGV, 2 do redis.call('HINCRBY', bucket, ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', bucket, ARGV[3])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
if old then return 2 end
return 1
"""

PAIR_RESULTS: tuple[Result, Result, Result] = ("same", "joined", "replaced")


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


@dataclass
class RedisAgreementStore:
    """The live store. `keep` never raises (its failures are counted in `errors` and logged
    at most once a minute, as `outputs.RedisSink` does): a verdict is published whatever
    Redis does. `outcome` and `tally` raise `AgreementUnavailable`, for their callers to
    count."""

    client: aioredis.Redis
    retention_s: int
    clock: Callable[[], float] = time.time
    # `tracejudge:agreement:`, plus the deployment's topic prefix where it is not the
    # default (`keys_of`): two deployments sharing a Redis keep apart tallies
    prefix: str = PREFIX
    errors: int = 0
    _last_log: float = field(default=0.0, init=False)
    # outcomes in flight at once: the client's pool (100 connections by default) is shared
    # with the evaluations' writes and the judge's cache, and must never run dry
    _calls: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(16), init=False)

    def __post_init__(self) -> None:
        self._pair = self.client.register_script(PAIR_SCRIPT)
        self._outcome = self.client.register_script(OUTCOME_SCRIPT)
        self._action = self.client.register_script(ACTION_SCRIPT)

    @property
    def bucket_ttl_s(self) -> int:
        return self.retention_s + DAY_S

    async def keep(self, request_id: str, kept: Kept) -> None:
        # in the client's shared pipeline, with the evaluations' writes (`redis_batch.py`)
        key = self.prefix + f"kept:{request_id}"

        def commands(pipe: Pipeline) -> int:
            pipe.set(key, kept.encode(), ex=self.retention_s)
            pipe.hgetall(self.prefix + f"out:{request_id}")
            return 2

        try:
            _, outcomes = await batch_of(self.client).run(commands)
            if outcomes:  # rare: an outcome came before its verdict
                # a connection each: bounded with the outcomes' calls, so that many verdicts
                # kept at once never drain the client's pool
                async with self._calls, self.client.pipeline(transaction=False) as pipe:
                    for source, value in outcomes.items():
                        source, value = _text(source), _text(value)
                        pair = pair_of(kept, source, value)
                        await self._pair_into(pipe, request_id, source, *pair)
                        await self._pair_into(pipe, request_id, None, *run_of(kept, pair[0]))
                        await self._steers_into(pipe, request_id, source, kept, value)
                    await pipe.execute()
        except Exception as exc:  # RedisError, OSError, or anything: never raised
            self._failed(exc, 1)

    async def _pair_into(
        self,
        client: aioredis.Redis | aioredis.client.Pipeline,
        rid: str,
        source: str | None,
        day: str,
        keys: list[str],
        stored: str,
    ) -> Any:
        """The pair of `source`'s outcome, or (None) the request's run."""
        key = f"run:{rid}" if source is None else f"pair:{rid}:{source}"
        return await self._pair(
            keys=[self.prefix + key],
            args=[stored, self.retention_s, self.bucket_ttl_s, self.prefix + "tally:", day, *keys],
            client=client,
        )

    async def outcome(self, request_id: str, truth: Truth, at: float) -> Result:
        async with self._calls:
            return await self._outcome_now(request_id, truth, at)

    async def _outcome_now(self, request_id: str, truth: Truth, at: float) -> Result:
        try:
            old, stored, kept = await self._outcome(
                keys=[self.prefix + f"out:{request_id}", self.prefix + f"kept:{request_id}"],
                args=[truth.source, out_value(truth, at), self.retention_s],
            )
            if kept is None:
                return "early" if old is None else "same" if old == stored else "replaced"
            # joined even when the outcome was stored before: a crash may have come between
            # storing it and counting its pair (the script counts a pair once)
            joined = Kept.decode(kept)
            pair = pair_of(joined, truth.source, _text(stored))
            # one round trip: the pair, then the run (counted once for all its sources)
            async with self.client.pipeline(transaction=False) as pipe:
                await self._pair_into(pipe, request_id, truth.source, *pair)
                await self._pair_into(pipe, request_id, None, *run_of(joined, pair[0]))
                await self._steers_into(pipe, request_id, truth.source, joined, _text(stored))
                done, *_ = await pipe.execute()
        except Exception as exc:
            self._failed(exc, 1)
            raise AgreementUnavailable(repr(exc)) from exc
        return PAIR_RESULTS[int(done)]  # type: ignore[call-overload]

    async def tally(self, since: float | None = None) -> Tally:
        tally = Tally()
        for bucket in await self._buckets("tally:", since):
            tally.merge(Tally.of_json({_text(k): int(n) for k, n in bucket.items() if int(n) > 0}))
        return tally

    async def kept_of(self, request_id: str) -> Kept | None:
        try:
            found = await self.client.get(self.prefix + f"kept:{request_id}")
            return None if found is None else Kept.decode(found)
        except Exception as exc:  # a follow-up's evaluation goes out without its origin's
            self._failed(exc, 1)
            return None

    async def count_action(self, what: str, request_id: str, at: float, amounts: Amounts) -> Result:
        try:
            done = await self._act_into(self.client, what, request_id, at, amounts)
        except Exception as exc:
            self._failed(exc, 1)
            raise AgreementUnavailable(repr(exc)) from exc
        return PAIR_RESULTS[int(done)]  # type: ignore[call-overload]

    async def _act_into(
        self,
        client: aioredis.Redis | aioredis.client.Pipeline,
        what: str,
        rid: str,
        at: float,
        amounts: Amounts,
    ) -> Any:
        day, stored = action_pair(at, amounts)
        return await self._action(
            keys=[self.prefix + f"act:{what}:{rid}"],
            args=[
                stored,
                self.retention_s,
                self.bucket_ttl_s,
                self.prefix + "actions:",
                day,
                *(x for pair in amounts for x in pair),
            ],
            client=client,
        )

    async def _steers_into(
        self, pipe: aioredis.client.Pipeline, rid: str, source: str, kept: Kept, value: str
    ) -> None:
        """What the outcome of `source` (stored `value`) counts for the steers of a steered
        run, in its day bucket; nothing for a run never steered."""
        ok, at = outcome_of(value)
        amounts = steer_outcomes(kept, ok)
        if amounts:
            await self._act_into(pipe, steer_outcome_key(source), rid, at, amounts)

    async def action_tally(self, since: float | None = None) -> ActionTally:
        tally = ActionTally()
        for bucket in await self._buckets("actions:", since):
            tally.add((_text(k), int(n)) for k, n in bucket.items())
        return tally

    async def _buckets(self, name: str, since: float | None) -> list[dict[Any, Any]]:
        now = self.clock()
        start = now - self.retention_s if since is None else max(since, now - self.bucket_ttl_s)
        days = _days(start, now + DAY_S)  # a day ahead: an event's clock may run ahead
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for day in days:
                    pipe.hgetall(self.prefix + name + day)
                found: list[dict[Any, Any]] = await pipe.execute()
        except Exception as exc:
            self._failed(exc, 1)
            raise AgreementUnavailable(repr(exc)) from exc
        return found

    def _failed(self, exc: BaseException, writes: int) -> None:
        self.errors += writes
        now = time.monotonic()
        if now - self._last_log > 60:
            self._last_log = now
            log.warning("agreement store failed (%d so far): %r", self.errors, exc)

    async def aclose(self) -> None:
        await batch_of(self.client).flush()


def action_pair(at: float, amounts: Amounts) -> tuple[str, str]:
    """The day bucket of what a request counts, and the counts as stored (`act:` key)."""
    day = day_of(at)
    return day, json.dumps([day, [list(a) for a in amounts]], separators=(",", ":"))


def outcome_of(value: str) -> tuple[bool, float]:
    """A stored outcome (`out_value`): ok, and its time."""
    ok, _, at = value.partition("|")
    return ok == "1", float(at)


def steer_outcome_key(source: str) -> str:
    """The `what` of an outcome's counts for a steered run's steers (`act:` key)."""
    return f"steer_outcome:{source}"


def keys_of(topic_prefix: str) -> str:
    """The key prefix of a deployment (its topics' prefix)."""
    return PREFIX if topic_prefix == "tracejudge." else f"{PREFIX}{topic_prefix}"


def _days(start: float, end: float) -> list[str]:
    """The UTC days from `start` to `end`, both included (a bounded count: the retention's)."""
    first = int(start // DAY_S)
    return [day_of(d * DAY_S) for d in range(first, int(end // DAY_S) + 1)]


@dataclass
class MemoryAgreementStore:
    """The same semantics in a process: for `tracejudge replay` and the tests. No expiry."""

    kept: dict[str, Kept] = field(default_factory=dict)
    outcomes: dict[str, dict[str, str]] = field(default_factory=dict)
    # (request id, outcome source) -> pair; (request id, None) -> the request's run
    pairs: dict[tuple[str, str | None], tuple[str, list[str], str]] = field(default_factory=dict)
    buckets: dict[str, Tally] = field(default_factory=dict)
    acts: dict[tuple[str, str], tuple[str, Amounts, str]] = field(default_factory=dict)
    action_buckets: dict[str, ActionTally] = field(default_factory=dict)
    errors: int = 0

    async def keep(self, request_id: str, kept: Kept) -> None:
        self.kept[request_id] = kept
        for source, value in self.outcomes.get(request_id, {}).items():
            pair = pair_of(kept, source, value)
            self._pair(request_id, source, pair)
            self._pair(request_id, None, run_of(kept, pair[0]))
            self._steers(request_id, source, kept, value)

    async def outcome(self, request_id: str, truth: Truth, at: float) -> Result:
        stored_by = self.outcomes.setdefault(request_id, {})
        old = stored_by.get(truth.source)
        value = out_value(truth, at)
        if old is not None and old[:1] == value[:1]:
            value = old
        stored_by[truth.source] = value
        kept = self.kept.get(request_id)
        if kept is None:
            return "early" if old is None else "same" if old == value else "replaced"
        pair = pair_of(kept, truth.source, value)
        done = self._pair(request_id, truth.source, pair)
        self._pair(request_id, None, run_of(kept, pair[0]))
        self._steers(request_id, truth.source, kept, value)
        return done

    def _steers(self, rid: str, source: str, kept: Kept, value: str) -> None:
        ok, at = outcome_of(value)
        amounts = steer_outcomes(kept, ok)
        if amounts:
            self._act(steer_outcome_key(source), rid, at, amounts)

    def _pair(self, rid: str, source: str | None, pair: tuple[str, list[str], str]) -> Result:
        old = self.pairs.get((rid, source))
        if old is not None and old[2] == pair[2]:
            return "same"
        if old is not None:
            self.buckets[old[0]].add(_cells_of(old[1]), -1)
        self.buckets.setdefault(pair[0], Tally()).add(_cells_of(pair[1]))
        self.pairs[(rid, source)] = pair
        return "joined" if old is None else "replaced"

    async def tally(self, since: float | None = None) -> Tally:
        return _merged(self.buckets, since, Tally())

    async def kept_of(self, request_id: str) -> Kept | None:
        return self.kept.get(request_id)

    async def count_action(self, what: str, request_id: str, at: float, amounts: Amounts) -> Result:
        return self._act(what, request_id, at, amounts)

    def _act(self, what: str, request_id: str, at: float, amounts: Amounts) -> Result:
        day, stored = action_pair(at, amounts)
        old = self.acts.get((what, request_id))
        if old is not None and old[2] == stored:
            return "same"
        if old is not None:
            self.action_buckets[old[0]].add(old[1], -1)
        self.action_buckets.setdefault(day, ActionTally()).add(amounts)
        self.acts[(what, request_id)] = (day, amounts, stored)
        return "joined" if old is None else "replaced"

    async def action_tally(self, since: float | None = None) -> ActionTally:
        return _merged(self.action_buckets, since, ActionTally())


class _Mergeable(Protocol):
    def merge(self, other: Any, /) -> None: ...


_T = TypeVar("_T", bound=_Mergeable)


def _merged(buckets: dict[str, _T], since: float | None, into: _T) -> _T:
    """The day buckets from the day of `since` on (all: None), merged into `into`."""
    first = None if since is None else day_of(since)
    for day, bucket in buckets.items():
        if first is None or day >= first:
            into.merge(bucket)
    return into


def _cells_of(keys: Iterable[str]) -> list[Cell]:
    return [Cell.of_key(k) for k in keys]
