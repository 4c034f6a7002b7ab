"""Where the worker's results go: topics (delivery acknowledged before the input record is)
and Redis (best effort).

Handlers only see the `Channel` and `Lookup` protocols: in the worker they are Faust topics and
`RedisSink`; in unit tests, `tests/memory.py` records what was sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from tracejudge.judges.agreement.action_effects import (
    asked,
    followed,
    iterations,
    reflection,
    steered,
)
from tracejudge.judges.agreement.tally import Kept
from tracejudge.judges.verdict.encoded import Made, chained
from tracejudge.models.names import REDIS_EVALUATION_KEY, REDIS_TIMELINE_KEY
from tracejudge.streams.agreement.store import AgreementStore, AgreementUnavailable
from tracejudge.streams.shared.commit import later
from tracejudge.streams.shared.evaluation_export import EvaluationExporter
from tracejudge.streams.shared.metrics import Metrics, quadrant
from tracejudge.streams.shared.redis_batch import batch_of
from tracejudge.streams.shared.verdict_log import VerdictLog

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]


class Channel(Protocol):
    """A topic to send to. `send` returns once the record is buffered; await the result for
    the broker's acknowledgement (Faust's `Topic.send` has this shape)."""

    async def send(
        self,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
    ) -> Awaitable[Any]: ...


class Lookup(Protocol):
    """The key-value store agents read verdicts and early-stop decisions from."""

    @property
    def enabled(self) -> bool: ...

    @property
    def errors(self) -> int: ...

    async def put_at(self, key: str, value: bytes) -> bool:
        """`value`: encoded (and signed) as published; an agent may be polling for it."""
        ...

    async def put_encoded(self, key: str, value: bytes, *, only_new: bool = False) -> bool:
        """`value`: as `encode` made it (masked). `only_new`: written only where the key holds
        nothing (a pending verdict never replaces the judge's final one)."""
        ...


@dataclass
class Prompt:
    """A topic an agent waits on (early-stop decisions, retry requests): each record is sent,
    then `now` sends what the producer holds for its linger, this record with it."""

    topic: Channel
    now: Callable[[], object]

    async def send(
        self,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
    ) -> Awaitable[Any]:
        delivery = await self.topic.send(key=key, value=value, partition=partition, headers=headers)
        self.now()
        return delivery


async def deliver(channel: Channel, key: bytes | None, value: bytes | None) -> None:
    """Send one record and wait until the broker has it."""
    await (await channel.send(key=key, value=value))


@dataclass
class VerdictPublisher:
    """Sends a verdict's events; once the broker has them, writes Redis. The waiting is left
    for `later`, so the window agent goes on meanwhile and the input record is acknowledged
    only after it (a crash in between publishes the verdict again, same evaluation_id).
    """

    evaluations: Channel
    reflections: Channel
    alerts: Channel
    lookup: Lookup
    metrics: Metrics = field(default_factory=Metrics)
    log: VerdictLog = field(default_factory=VerdictLog)
    # each evaluation also as an OpenTelemetry event (TRACEJUDGE_OTEL_EVALUATIONS_ENDPOINT)
    exporter: EvaluationExporter | None = None
    # where a final verdict is kept for its outcomes (None: no Redis, no live agreement), and
    # a follow-up's parent's verdict found
    agreement: AgreementStore | None = None
    # a follow-up later than this after its parent's verdict counts as late, not followed up
    followup_window_s: float = 3600.0
    # where each final verdict's failure mode goes, keyed by agent (None: modes off)
    mode_runs: Channel | None = None

    async def publish(self, made: Made, terminal_at: float | None = None) -> None:
        """Send a verdict's encoded records; the acks and the Redis write are left for
        `later`."""
        if made.parent is not None and self.agreement is not None:
            # a follow-up: its evaluation says what its parent's verdict was (None when not
            # found: expired, never seen, or Redis failed; the evaluation says found false)
            origin = await self.agreement.kept_of(made.parent)
            if origin is not None:
                made = chained(made, origin)
        key = made.request_id.encode("utf-8")
        assert made.evaluation is not None and made.summary is not None
        pending = [await self.evaluations.send(key=key, value=made.evaluation)]
        if made.reflection is not None:
            pending.append(await self.reflections.send(key=key, value=made.reflection))
        for alert in made.alerts:
            pending.append(await self.alerts.send(key=key, value=alert))
        if self.mode_runs is not None and made.mode_run is not None:
            # keyed by agent: one agent's modes are counted in one place, in order
            agent = (made.summary.agent_name or "").encode("utf-8")
            pending.append(await self.mode_runs.send(key=agent, value=made.mode_run))
        await later(self._delivered(made, pending, terminal_at))

    async def _delivered(
        self, made: Made, pending: list[Awaitable[Any]], terminal_at: float | None
    ) -> None:
        summary = made.summary
        assert made.evaluation is not None and summary is not None
        await asyncio.gather(*pending)
        # a pending verdict delivered again after the judge's (a crash between the two) must
        # not hide it: written only where there is none yet
        only_new = summary.pending
        writes: list[Awaitable[object]] = [
            self.lookup.put_encoded(
                REDIS_EVALUATION_KEY.format(request_id=made.request_id),
                made.evaluation,
                only_new=only_new,
            )
        ]
        if made.timeline is not None:  # in the same pipeline as the evaluation
            key = REDIS_TIMELINE_KEY.format(request_id=made.request_id)
            writes.append(self.lookup.put_encoded(key, made.timeline, only_new=only_new))
        kept = None if summary.pending else made.kept  # a final verdict's, for its outcomes
        if self.agreement is not None and kept is not None:
            # before the input record is acknowledged: a crash publishes it again, and keeps
            # it again (a pair counts once however often); never raises (`RedisAgreementStore`);
            # queued with the writes above, so they share a round trip
            writes.append(self.agreement.keep(made.request_id, kept))
        await asyncio.gather(*writes)
        m = self.metrics
        if summary.pending:
            # the time to a first verdict is this one's; the request is counted with its final
            m.counts["evaluations_pending"] += 1
            m.evaluations_pending.inc()
            if terminal_at is not None:
                m.verdict_latency.observe(max(0.0, time.time() - terminal_at))
            return
        if self.agreement is not None and kept is not None:
            await self._count_actions(self.agreement, made, kept)
        if self.exporter is not None:
            self.exporter.offer(json.loads(made.evaluation))
        self.metrics.counts["evaluations"] += 1
        self.metrics.counts[f"judge_{summary.judge_status}"] += 1
        if summary.reflection:
            self.metrics.counts["reflections"] += 1
        self.metrics.counts["alerts"] += len(summary.alert_kinds)
        m.evaluations.labels(
            summary.judge_status, quadrant(summary.success, summary.incomplete)
        ).inc()
        if summary.reflection:
            m.reflections.inc()
        for kind in summary.alert_kinds:
            m.alerts.labels(kind).inc()
        m.agents.evaluated(summary.agent_name, summary.overall_score, summary.passed)
        for name, score in summary.dimensions:
            m.agents.dimension_scores.labels(
                m.agents.agent_label(summary.agent_name), name
            ).observe(score)
        if summary.usage is not None:
            m.agents.add(summary.agent_name, summary.usage)
        if summary.interventions:
            m.agents.intervened(summary.agent_name, summary.interventions, summary.saved)
        if terminal_at is not None:
            m.verdict_latency.observe(max(0.0, time.time() - terminal_at))
        self.log.note(summary)

    async def _count_actions(self, store: AgreementStore, made: Made, kept: Kept) -> None:
        """The effect of actions (judges/agreement/action_effects.py): a reflection asked, a
        follow-up of one, an iterative loop told it may stop (or not), a loop steered.
        Counted once per request whatever the deliveries (the store's act keys); a failure
        loses a count, never the verdict (the store counts and logs it)."""
        rid = made.request_id
        try:
            if made.summary is not None and made.summary.reflection:
                await store.count_action(
                    "asked", rid, kept.ts, asked(kept, reflection(kept.round + 1))
                )
            if made.origin is not None:
                counts = followed(made.origin, kept, self.followup_window_s)
                await store.count_action("follow", rid, kept.ts, counts)
            loop = None if made.summary is None else made.summary.iterations
            if loop is not None:
                s = made.summary
                assert s is not None
                decided, used, limit = loop
                counts = iterations(
                    kept.agent,
                    decided=decided,
                    used=used,
                    limit=limit,
                    success=s.success,
                    complete=not s.incomplete,
                    score=s.overall_score,
                )
                await store.count_action("stop", rid, kept.ts, counts)
            s = made.summary
            if s is not None and any(m.action == "steer" for m in s.interventions_made):
                counts = steered(
                    kept.agent,
                    s.interventions_made,
                    closed_by=s.closed_by,
                    passed=s.passed,
                    success=s.success,
                    incomplete=s.incomplete,
                )
                await store.count_action("steer", rid, kept.ts, counts)
        except AgreementUnavailable:
            pass


def redis_client(url: str, timeout_s: float = 1.0) -> aioredis.Redis | None:
    """One client per worker, short timeouts: Redis must never hold the stream up."""
    if not url:
        return None
    return aioredis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


class RedisSink:
    """Latest evaluation per request under `tracejudge:evaluation:{request_id}`.

    Redis is a look-up convenience, not the system of record: failures are counted and logged
    (at most once a minute) and never stop the stream. Writes go in the client's shared
    pipeline (`redis_batch.py`): one round trip for every write queued meanwhile, the kept
    verdicts' included, not one per verdict.
    """

    def __init__(self, client: aioredis.Redis | None, ttl_s: int) -> None:
        self.ttl_s = ttl_s
        self.errors = 0
        self._last_log = 0.0
        self._client = client
        self._batch = None if client is None else batch_of(client)

    @property
    def enabled(self) -> bool:
        return self._client is not None

    async def put_at(self, key: str, value: bytes) -> bool:
        # a decision an agent may be polling for: its pipeline goes at once
        return await self._put(key, value, only_new=False, urgent=True)

    async def put_encoded(self, key: str, value: bytes, *, only_new: bool = False) -> bool:
        return await self._put(key, value, only_new=only_new, urgent=False)

    async def _put(self, key: str, value: bytes, *, only_new: bool, urgent: bool) -> bool:
        if self._batch is None:
            return False

        def commands(pipe: Pipeline) -> int:
            pipe.set(key, value, ex=self.ttl_s, nx=only_new)
            return 1

        try:
            await self._batch.run(commands, urgent=urgent)
        except Exception as exc:  # RedisError, OSError, or anything: the stream goes on
            self._failed(exc, 1)
            return False
        return True

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    def _failed(self, exc: BaseException, writes: int) -> None:
        self.errors += writes
        now = time.monotonic()
        if now - self._last_log > 60:
            self._last_log = now
            log.warning("redis write failed (%d so far): %r", self.errors, exc)
