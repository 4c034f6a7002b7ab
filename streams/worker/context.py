"""Everything the worker's handlers share, built once from settings (no Faust in here).

The app factory hands in Faust topics and tables; unit tests hand in memory channels and dicts
(`tests/memory.py`) and drive the very same handlers.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from tracejudge.judges.rules import RuleJudge
from tracejudge.judges.verdicts import evaluator_version
from tracejudge.prompts import final_judge_prompt
from tracejudge.streams.judging.jobs import JudgeJobHandler
from tracejudge.streams.judging.stage import JudgeStage, judge_version
from tracejudge.streams.settings import Settings
from tracejudge.streams.worker.closing import LLMRouting, WindowCloser
from tracejudge.streams.worker.early_stop import EarlyStopper
from tracejudge.streams.worker.errors import DeadLetters, ErrorPolicy, Exit, exit_for_supervisor
from tracejudge.streams.worker.events import EventHandler, Timeouts
from tracejudge.streams.worker.idle import IdleScanner, MarkerLog
from tracejudge.streams.worker.liveness import PartitionLiveness
from tracejudge.streams.worker.outputs import Channel, Lookup, RedisSink, VerdictPublisher
from tracejudge.streams.worker.responses import ResponseHandler
from tracejudge.streams.worker.windows import WindowStore

Table = MutableMapping[str, Any]


@dataclass
class Channels:
    events: Channel  # the input topic: idle markers are sent through it
    judge_requests: Channel
    evaluations: Channel
    reflections: Channel
    alerts: Channel
    retries: Channel
    control: Channel
    dlq: Channel


@dataclass
class Tables:
    window_meta: Table
    window_steps: Table
    window_seen: Table
    retry_state: Table


@dataclass
class Liveness:
    assigned: bool = False  # the first rebalance has completed
    last_progress: float = field(default_factory=time.monotonic)  # a record was consumed


@dataclass
class WorkerContext:
    settings: Settings
    counters: Counter[str]
    liveness: Liveness
    store: WindowStore
    lookup: Lookup
    publisher: VerdictPublisher
    errors: ErrorPolicy
    partitions: PartitionLiveness  # of the events topic: idle time counts only while live
    events: EventHandler
    responses: ResponseHandler
    idle: IdleScanner
    judge_jobs: JudgeJobHandler | None  # None: the LLM judge is off

    @classmethod
    def build(
        cls,
        settings: Settings,
        channels: Channels,
        tables: Tables,
        redis: aioredis.Redis | None,
        *,
        lookup: Lookup | None = None,
        judge_stage: JudgeStage | None = None,
        clock: Callable[[], float] = time.time,
        exit: Exit = exit_for_supervisor,
    ) -> WorkerContext:
        """Wire the handlers. `lookup` and `judge_stage` default to the real ones; tests may
        pass their own (a memory lookup, a stage whose model is a fake server)."""
        counters: Counter[str] = Counter()
        store = WindowStore(
            meta=tables.window_meta,
            steps=tables.window_steps,
            seen=tables.window_seen,
            max_steps=settings.max_trace_steps,
            capture=settings.trace_capture,
        )
        lookup = lookup or RedisSink(redis, settings.evaluation_ttl_s)
        rules = RuleJudge(tool_call_budget=settings.tool_call_budget)
        policy = settings.verdict_policy()
        version, judge_stage, llm = _judging(settings, rules, redis, judge_stage)
        publisher = VerdictPublisher(
            channels.evaluations, channels.reflections, channels.alerts, lookup, counters
        )
        closer = WindowCloser(
            store, rules, policy, version, publisher, channels.judge_requests, llm, counters, clock
        )
        early = None
        if settings.early_stop_enabled:
            early = EarlyStopper(
                store, settings.early_stop_policy(), channels.control, lookup, counters, clock
            )
        markers, liveness = MarkerLog(), PartitionLiveness(clock)
        timeouts = Timeouts(settings.idle_timeout_s, settings.closed_retention_s)
        limit = settings.max_event_bytes
        return cls(
            settings=settings,
            counters=counters,
            liveness=Liveness(),
            store=store,
            lookup=lookup,
            publisher=publisher,
            errors=ErrorPolicy(DeadLetters(channels.dlq, counters, settings.dlq_payload), exit),
            partitions=liveness,
            events=EventHandler(
                store,
                closer,
                early,
                timeouts,
                markers,
                liveness,
                counters,
                clock,
                limit,
                judging=settings.enabled,
            ),
            responses=ResponseHandler(
                tables.retry_state,
                channels.retries,
                channels.alerts,
                settings.generic_max_retries,
                counters,
                clock,
                limit,
                judging=settings.enabled,
            ),
            idle=IdleScanner(
                store, channels.events, *timeouts.seconds(), markers, liveness, counters, clock
            ),
            judge_jobs=JudgeJobHandler(judge_stage, publisher.publish) if judge_stage else None,
        )


def _judging(
    settings: Settings, rules: RuleJudge, redis: aioredis.Redis | None, stage: JudgeStage | None
) -> tuple[str, JudgeStage | None, LLMRouting | None]:
    """The evaluator version, and the judge stage and routing when the LLM judge is on."""
    if not settings.llm_judge_enabled:
        return evaluator_version(rules.version), None, None
    version = evaluator_version(rules.version, judge_version(settings, final_judge_prompt()))
    stage = stage or JudgeStage(settings, redis, settings.verdict_policy(), version)
    return version, stage, LLMRouting(settings.llm_sample_rate, settings.llm_max_input_chars)
