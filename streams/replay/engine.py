"""`tracejudge replay`: recorded events through the worker's own handlers, without Kafka.

The same `WorkerContext` the worker builds (windows, rules, early stops, the LLM judge and its
cache when the settings turn it on), with in-memory channels and tables: a replay's verdicts
are the worker's verdicts. Evaluations are kept in memory, never written to Redis.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tracejudge.judges.agreement.action_effects import ActionTally
from tracejudge.judges.agreement.tally import Tally
from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.streams.agreement.store import MemoryAgreementStore
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.shared.outputs import redis_client
from tracejudge.streams.worker.context import Channels, Tables, WorkerContext


@dataclass
class CollectingChannel:
    """A topic in memory: what was sent, in order."""

    sent: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)

    async def send(
        self,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> Awaitable[Any]:
        self.sent.append((key, value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def values(self, start: int = 0) -> list[dict[str, Any]]:
        return [json.loads(v or b"null") for _, v in self.sent[start:]]


@dataclass
class MemoryLookup:
    """The `Lookup` in memory, under the keys Redis would have: a replay's evaluations and
    early-stop decisions stay in it (production Redis untouched); the unit tests use it too."""

    data: dict[str, str] = field(default_factory=dict)
    errors: int = 0
    enabled: bool = True

    async def put_at(self, key: str, value: bytes) -> bool:
        self.data[key] = value.decode("utf-8")
        return True

    async def put_encoded(self, key: str, value: bytes, *, only_new: bool = False) -> bool:
        if not (only_new and key in self.data):
            self.data[key] = value.decode("utf-8")
        return True


class ReplayFailed(RuntimeError):
    """What would have made the worker exit for its supervisor."""


def _stop(reason: str, exc: BaseException) -> NoReturn:
    raise ReplayFailed(reason) from exc


@dataclass
class ReplayResult:
    settings: Settings
    events: int
    evaluations: dict[str, dict[str, Any]]  # request_id -> the evaluation published last
    reflections: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    early_stops: list[dict[str, Any]]
    dead_letters: int
    # budget and loop interventions, sent on the control topic beside the early stops
    interventions: list[dict[str, Any]] = field(default_factory=list)
    # request_id -> the judge job sent for it (the last one): its `rules` are what the rules
    # said where the judge's verdict replaced theirs (`kept_of`'s `rules`)
    judge_jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # every session verdict revision in the order published, and each session's last
    # ((agent, session_key) -> verdict): final, since a replay ends every session at its end
    session_verdicts: list[dict[str, Any]] = field(default_factory=list)
    sessions: dict[tuple[str | None, str], dict[str, Any]] = field(default_factory=dict)
    # the failure modes announced, in order (the verdicts' own clock: see docs/modes.md)
    mode_alerts: list[dict[str, Any]] = field(default_factory=list)
    # the outcome events in the file joined to the verdicts, as the live worker joins them
    # (a memory store: same semantics); None when the file holds no outcome
    agreement: Tally | None = None
    # the effect of the actions, counted from the replayed verdicts (and the file's outcomes)
    # as the live worker counts them, in the same memory store
    actions: ActionTally | None = None


async def replay(
    settings: Settings,
    records: Iterable[tuple[bytes | None, bytes]],
    progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Feed (key, value) records in order; close what is still open at the end as the idle
    timeout would; run queued judge jobs as the judge consumer would."""
    channels = _channels()
    # a replay judges what it queues itself, whatever the cluster's workers do
    settings = settings.model_copy(update={"worker_judges": True})
    redis = redis_client(settings.redis_url) if settings.llm_judge_enabled else None
    agreement = MemoryAgreementStore()  # never the live tally in Redis
    ctx = WorkerContext.build(
        settings,
        channels,
        Tables({}, {}, {}),
        redis,
        lookup=MemoryLookup(),
        exit=_stop,
        agreement=agreement,
    )
    ctx.partitions.observe({p: 0 for p in range(settings.partitions)}, {})  # all live
    topic = settings.topic(names.EVENTS)
    jobs = _JobDrain(ctx, channels, settings)
    sessions = _SessionDrain(ctx, channels, settings)
    modes = _ModeDrain(ctx, channels, settings)
    count = 0
    try:
        for count, (key, value) in enumerate(records, start=1):
            if key is None:  # the worker refuses unkeyed events; so do we, the same way
                key = b""
            await ctx.errors.run(InRecord(topic, 0, count, key, value, {}), ctx.events)
            await jobs.run()
            await sessions.run()
            await modes.run()
            if progress is not None:
                progress(count)
        for rid in list(ctx.store.open):
            await ctx.events.closer.close(rid, "idle_timeout")
        await jobs.run(final=True)
        await sessions.run(final=True)
        await modes.run()
    finally:
        if ctx.judge_jobs is not None:
            await ctx.judge_jobs.aclose()
        if redis is not None:
            await redis.aclose()
    result = _result(settings, count, channels, ctx)
    if agreement.outcomes:
        result.agreement = await agreement.tally()
    result.actions = await agreement.action_tally()
    return result


async def replay_tables(settings: Settings, records: Iterable[InRecord]) -> Tables:
    """The tables a worker holds after reading `records` in order, each at its own partition
    and offset (a closed marker names the offset of the record that closed its window): a
    fresh replay to compare a live worker's changelogs with. Unlike `replay`, nothing is
    closed at the end (a window left open stays open) and no judge job is run (a verdict
    changes no table). Every step is written at once (no hold: which steps a live worker
    wrote depends on timing, whether a window is open does not)."""
    channels = _channels()
    tables = Tables({}, {}, {}, {})
    ctx = WorkerContext.build(
        settings.model_copy(update={"worker_judges": False}),
        channels,
        tables,
        None,
        lookup=MemoryLookup(),
        exit=_stop,
        agreement=MemoryAgreementStore(),
    )
    ctx.partitions.observe({p: 0 for p in range(settings.partitions)}, {})  # all live
    for record in records:
        await ctx.errors.run(record, ctx.events)
    await asyncio.sleep(0)  # the acknowledged verdicts' callbacks: their steps forgotten
    return tables


def _channels() -> Channels:
    names_ = (
        "events", "judge_requests", "evaluations", "reflections", "alerts", "retries",
        "control", "dlq", "session_turns", "sessions", "mode_runs", "modes",
    )  # fmt: skip
    return Channels(**{name: CollectingChannel() for name in names_})


@dataclass
class _SessionDrain:
    """Turns (and ends) the closer sent, handled by the session agent's handler in the order
    sent, as the session agent takes them; at the end, every session made final."""

    ctx: WorkerContext
    channels: Channels
    settings: Settings
    done: int = 0

    async def run(self, final: bool = False) -> None:
        handler = self.ctx.sessions
        turns = self.channels.session_turns
        if handler is None or not isinstance(turns, CollectingChannel):
            return
        topic = self.settings.topic(names.SESSION_TURNS)
        while True:
            while self.done < len(turns.sent):
                key, value = turns.sent[self.done]
                self.done += 1
                await self.ctx.errors.run(InRecord(topic, 0, self.done, key, value, {}), handler)
            if handler.reader is None or not handler.reader.tasks:
                break
            await handler.reader.drain()  # the judge's readings come back as marks: taken next
        if final:
            await handler.close_all()


@dataclass
class _ModeDrain:
    """Modes the publisher sent, counted by the modes agent's handler in the order sent."""

    ctx: WorkerContext
    channels: Channels
    settings: Settings
    done: int = 0

    async def run(self) -> None:
        handler = self.ctx.modes
        runs = self.channels.mode_runs
        if handler is None or not isinstance(runs, CollectingChannel):
            return
        topic = self.settings.topic(names.MODE_RUNS)
        while self.done < len(runs.sent):
            key, value = runs.sent[self.done]
            self.done += 1
            await self.ctx.errors.run(InRecord(topic, 0, self.done, key, value, {}), handler)


@dataclass
class _JobDrain:
    """Judge jobs the closer queued, run as the judge consumer runs them: up to
    `llm_concurrency` at once."""

    ctx: WorkerContext
    channels: Channels
    settings: Settings
    done: int = 0

    async def run(self, final: bool = False) -> None:
        handler = self.ctx.judge_jobs
        queue = self.channels.judge_requests
        assert isinstance(queue, CollectingChannel)
        if handler is None:
            return
        width = 1 if final else self.settings.llm_concurrency
        while len(queue.sent) - self.done >= width or (final and self.done < len(queue.sent)):
            batch = queue.sent[self.done : self.done + self.settings.llm_concurrency]
            self.done += len(batch)
            topic = self.settings.topic(names.JUDGE_REQUESTS)
            await asyncio.gather(
                *(
                    self.ctx.errors.run(InRecord(topic, 0, self.done, k, v, {}), handler)
                    for k, v in batch
                )
            )


def _result(
    settings: Settings, events: int, channels: Channels, ctx: WorkerContext
) -> ReplayResult:
    def sent(channel: Any) -> list[dict[str, Any]]:
        assert isinstance(channel, CollectingChannel)
        return channel.values()

    evaluations = {e["request_id"]: e for e in sent(channels.evaluations)}
    revisions = sent(channels.sessions)
    control = sent(channels.control)
    return ReplayResult(
        settings=settings,
        events=events,
        evaluations=evaluations,
        reflections=sent(channels.reflections),
        alerts=sent(channels.alerts),
        early_stops=[c for c in control if c.get("type") != "intervention"],
        interventions=[c for c in control if c.get("type") == "intervention"],
        dead_letters=ctx.counters["dead_lettered"],
        judge_jobs={j["facts"]["request_id"]: j for j in sent(channels.judge_requests)},
        session_verdicts=revisions,
        sessions={(v["agent_name"], v["session_key"]): v for v in revisions},
        mode_alerts=sent(channels.modes),
    )


def lines_of(raw: bytes) -> list[tuple[bytes | None, bytes]]:
    """A JSONL recording as (key, value) records: keyed by request_id, as `publish` sends."""
    from tracejudge.streams.kafka.io import key_of

    return [(key_of(line), line) for line in raw.splitlines() if line.strip()]
