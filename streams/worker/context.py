"""Everything the worker's handlers share, built once from settings (no Faust in here).

The app factory hands in Faust topics and tables; unit tests hand in memory channels and dicts
(`tests/memory.py`) and drive the very same handlers.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import redis.asyncio as aioredis

from tracejudge.judges.agreement.calibration import CalibrationBook
from tracejudge.judges.llm.sampling import parse_rates
from tracejudge.judges.modes.watch import ModeTimes
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.judges.verdict.make import Judging, LLMRouting
from tracejudge.settings import Settings
from tracejudge.streams.agreement.live import LiveAgreement, agreement_store
from tracejudge.streams.agreement.outcomes import AgreementOutcomes
from tracejudge.streams.agreement.store import AgreementStore, RedisAgreementStore
from tracejudge.streams.agreement.thresholds import alert_thresholds
from tracejudge.streams.judge.jobs import JudgeJobHandler
from tracejudge.streams.judge.stage import JudgeStage, judging_version
from tracejudge.streams.modes.handler import ModeHandler
from tracejudge.streams.sessions.handler import SessionHandler, SessionOutputs, SessionTimes
from tracejudge.streams.sessions.reader import SessionReader
from tracejudge.streams.shared.commit import CommitRule
from tracejudge.streams.shared.errors import DeadLetters, ErrorPolicy, Exit, exit_for_supervisor
from tracejudge.streams.shared.evaluation_export import evaluation_exporter
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import Channel, Lookup, RedisSink, VerdictPublisher
from tracejudge.streams.worker.baselines import BaselineBook
from tracejudge.streams.worker.checks import CheckRunner, CheckWall
from tracejudge.streams.worker.closing import WindowCloser
from tracejudge.streams.worker.early_stop import EarlyStopper
from tracejudge.streams.worker.events import EventHandler
from tracejudge.streams.worker.idle import IdleScanner, MarkerLog, Timeouts
from tracejudge.streams.worker.interventions import Intervener
from tracejudge.streams.worker.liveness import PartitionLiveness
from tracejudge.streams.worker.outcomes import CountingOutcomes, OutcomeTaker
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
    # the turns of sessions and their ends, keyed by session (None: sessions off), and the
    # session verdicts (None: the same)
    session_turns: Channel | None = None
    sessions: Channel | None = None
    # each final verdict's failure mode, keyed by agent (None: modes off), and the modes
    # announced (None: the same)
    mode_runs: Channel | None = None
    modes: Channel | None = None


@dataclass
class Tables:
    window_meta: Table
    window_steps: Table
    retry_state: Table
    baselines: Table = field(default_factory=dict)
    sessions: Table = field(default_factory=dict)
    modes: Table = field(default_factory=dict)


@dataclass
class Liveness:
    assigned: bool = False  # the first rebalance has completed
    last_progress: float = field(default_factory=time.monotonic)  # a record was consumed


@dataclass
class WorkerContext:
    settings: Settings
    metrics: Metrics
    liveness: Liveness
    store: WindowStore
    lookup: Lookup
    publisher: VerdictPublisher
    errors: ErrorPolicy
    partitions: PartitionLiveness  # of the events topic: idle time counts only while live
    events: EventHandler
    outcomes: OutcomeTaker  # where `events` hands outcome events (never to a window)
    responses: ResponseHandler
    idle: IdleScanner
    judge_jobs: JudgeJobHandler | None  # None: the LLM judge is off, or judges elsewhere
    # the session agent's handler and timer (None: sessions off)
    sessions: SessionHandler | None
    commits: CommitRule  # when an input record is acknowledged (and so committed)
    # the calibrated thresholds the verdict policy reads (the app refreshes them)
    calibration_book: CalibrationBook = field(default_factory=CalibrationBook)
    # where final verdicts meet their outcomes (None: no Redis), and the figures /metrics
    # serves from it (the app runs `live_agreement.run()`)
    agreement: AgreementStore | None = None
    live_agreement: LiveAgreement | None = None
    # the modes agent's handler (None: modes off)
    modes: ModeHandler | None = None

    @property
    def counters(self) -> Counter[str]:
        """The tallies /health shows (`Metrics.counts`)."""
        return self.metrics.counts

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
        hold_s: float = 0.0,
        outcomes: Callable[[Metrics], OutcomeTaker] | None = None,
        agreement: AgreementStore | None = None,
    ) -> WorkerContext:
        """Wire the handlers. `lookup` and `judge_stage` default to the real ones; tests may
        pass their own (a memory lookup, a stage whose model is a fake server). `hold_s`: steps
        held in memory (`windows.py`); only where records are acknowledged when their work is
        done. `outcomes`: makes, with the worker's metrics, where outcome events go (default:
        joined in `agreement`, the agreement store: Redis's, or only counted without Redis)."""
        metrics = Metrics()
        agreement = agreement or agreement_store(settings, redis)
        taker = _taker(metrics, clock, outcomes, agreement)
        store = _store(settings, tables, hold_s)
        lookup = lookup or RedisSink(redis, settings.evaluation_ttl_s)
        version, llm = _versions(settings)
        publisher = _publisher(settings, channels, lookup, metrics, agreement)
        book = CalibrationBook()  # one per process: the closer's policy and the judge's
        policy = settings.verdict_policy(book)
        metrics.readings.alert_thresholds = partial(
            alert_thresholds, book, settings, metrics.agents
        )
        judge_jobs = None
        if llm is not None and settings.worker_judges:
            stage = judge_stage or JudgeStage(settings, redis, policy, version, clock)
            stage.clock = clock  # one clock for closing a request and aging its judge job
            judge_jobs = JudgeJobHandler(stage, publisher, metrics)
        judging = _judging(settings, policy, version, llm, lookup)
        runner = _check_runner(settings, metrics)  # one for the closing and in-flight checks
        requests = channels.judge_requests
        closer = _closer(settings, store, judging, publisher, requests, clock, runner)
        early = _early_stopper(settings, store, channels.control, lookup, clock, metrics)
        markers, liveness, timeouts = MarkerLog(), PartitionLiveness(clock), _timeouts(settings)
        _read_into(metrics, store, lookup, judge_jobs)
        errors = ErrorPolicy(DeadLetters(channels.dlq, settings.dlq_payload, metrics), exit)
        return cls(
            settings=settings,
            metrics=metrics,
            liveness=Liveness(),
            store=store,
            lookup=lookup,
            publisher=publisher,
            errors=errors,
            partitions=liveness,
            events=EventHandler(
                store=store,
                closer=closer,
                early_stopper=early,
                timeouts=timeouts,
                markers=markers,
                liveness=liveness,
                clock=clock,
                max_event_bytes=settings.max_event_bytes,
                judging=settings.enabled,
                metrics=metrics,
                outcomes=taker,
                intervener=_intervener(settings, channels.control, clock, metrics, store, runner),
                outcome_keys=settings.outcome_key_set(),
            ),
            outcomes=taker,
            responses=_responses(settings, tables, channels, clock, metrics, agreement),
            idle=IdleScanner(store, channels.events, timeouts, markers, liveness, metrics, clock),
            judge_jobs=judge_jobs,
            sessions=_sessions(settings, channels, tables, publisher, judging, closer, judge_jobs),
            commits=CommitRule(errors),
            calibration_book=book,
            agreement=agreement,
            live_agreement=_live_agreement(agreement, metrics),
            modes=_modes(settings, channels, tables, publisher),
        )


def _publisher(
    settings: Settings,
    channels: Channels,
    lookup: Lookup,
    metrics: Metrics,
    agreement: AgreementStore | None,
) -> VerdictPublisher:
    return VerdictPublisher(
        channels.evaluations,
        channels.reflections,
        channels.alerts,
        lookup,
        metrics,
        exporter=evaluation_exporter(settings, metrics),
        agreement=agreement,
        followup_window_s=settings.action_followup_window_s,
    )


def _judging(
    settings: Settings, policy: Policy, version: str, llm: LLMRouting | None, lookup: Lookup
) -> Judging:
    return Judging(
        settings.tool_call_budget,
        policy,
        version,
        llm,
        # kept only where there is a Redis to keep them in (and the evaluations say so)
        timelines=settings.timelines if lookup.enabled else "no_redis",
    )


def _timeouts(settings: Settings) -> Timeouts:
    return Timeouts(
        settings.idle_timeout_s,
        settings.closed_retention_s,
        settings.changelog_retention_s / 2,  # written again well before retention
    )


def _store(settings: Settings, tables: Tables, hold_s: float) -> WindowStore:
    return WindowStore(
        meta=tables.window_meta,
        steps=tables.window_steps,
        max_steps=settings.max_trace_steps,
        max_events=settings.max_events_per_request,
        capture=settings.trace_capture,
        hold_s=hold_s,
        tail_steps=settings.trace_tail_steps,
        baselines=BaselineBook(
            tables.baselines, settings.baseline_min_runs, settings.baseline_epoch_runs
        ),
    )


def _early_stopper(
    settings: Settings,
    store: WindowStore,
    control: Channel,
    lookup: Lookup,
    clock: Callable[[], float],
    metrics: Metrics,
) -> EarlyStopper | None:
    if not settings.early_stop_enabled:
        return None
    policy = settings.early_stop_policy()
    return EarlyStopper(
        store,
        policy,
        control,
        lookup,
        clock,
        metrics,
        keys=settings.signing_keys(settings.topic_prefix),
    )


def _check_runner(settings: Settings, metrics: Metrics) -> CheckRunner | None:
    """What runs the team's checks (None: it has none): code checks in check processes."""
    if settings.check_book().empty:
        return None
    return CheckRunner(
        settings.check_timeout_s, metrics, CheckWall(processes=settings.check_processes)
    )


def _intervener(
    settings: Settings,
    control: Channel,
    clock: Callable[[], float],
    metrics: Metrics,
    store: WindowStore,
    runner: CheckRunner | None,
) -> Intervener | None:
    if not settings.interventions_enabled:
        return None
    checks = settings.check_book()
    return Intervener(
        settings.loop_rules(),
        settings.budget_book(),
        control,
        clock,
        store,
        metrics,
        keys=settings.signing_keys(settings.topic_prefix),
        checks=None if checks.empty else checks,
        check_runner=runner,
        ceiling=settings.loop_ceiling_calls,
    )


def _responses(
    settings: Settings,
    tables: Tables,
    channels: Channels,
    clock: Callable[[], float],
    metrics: Metrics,
    actions: AgreementStore | None,
) -> ResponseHandler:
    return ResponseHandler(
        marks=tables.retry_state,
        retries=channels.retries,
        alerts=channels.alerts,
        max_retries=settings.generic_max_retries,
        clock=clock,
        max_event_bytes=settings.max_event_bytes,
        judging=settings.enabled,
        metrics=metrics,
        actions=actions,
    )


def _read_into(
    metrics: Metrics, store: WindowStore, lookup: Lookup, judge_jobs: JudgeJobHandler | None
) -> None:
    """What /metrics reads at scrape time from where it lives."""
    readings, counts = metrics.readings, metrics.counts
    readings.open_windows = lambda: len(store.open)
    readings.redis_errors = lambda: lookup.errors
    readings.offset_repairs = lambda: counts["offset_skips_repaired"]
    if judge_jobs is not None:  # as of the last judge call
        readings.breaker_open = lambda: judge_jobs.breaker_open
        readings.rate_limit_waits = lambda: judge_jobs.rate_limit_waits


def _taker(
    metrics: Metrics,
    clock: Callable[[], float],
    outcomes: Callable[[Metrics], OutcomeTaker] | None,
    agreement: AgreementStore | None,
) -> OutcomeTaker:
    """Where outcome events go: the caller's taker, else joined in the agreement store (Redis,
    shared by every process; a replay's in memory), else (no Redis) only counted."""
    if outcomes is not None:
        return outcomes(metrics)
    if agreement is not None:
        return AgreementOutcomes(agreement, metrics, clock)
    return CountingOutcomes(metrics)


def _live_agreement(agreement: AgreementStore | None, metrics: Metrics) -> LiveAgreement | None:
    if not isinstance(agreement, RedisAgreementStore):
        return None  # a replay's store: its report shows the figures
    live = LiveAgreement(agreement)
    metrics.readings.agreement = live.metrics
    return live


def _versions(settings: Settings) -> tuple[str, LLMRouting | None]:
    """The evaluator version, and the routing of closed requests when the LLM judge is on."""
    version = judging_version(settings)
    if not settings.llm_judge_enabled:
        return version, None
    return version, LLMRouting(
        settings.llm_sample_rate,
        settings.llm_max_input_chars,
        parse_rates(settings.llm_sample_rates),  # valid: the settings checked it
        settings.llm_judge_flagged,
        settings.llm_input_tokens,
    )


def _closer(
    settings: Settings,
    store: WindowStore,
    judging: Judging,
    publisher: VerdictPublisher,
    judge_requests: Channel,
    clock: Callable[[], float],
    runner: CheckRunner | None,
) -> WindowCloser:
    """The closer, with the team's checks when any are configured (none: nothing added)."""
    checks = settings.check_book()
    return WindowCloser(
        store,
        judging,
        publisher,
        judge_requests,
        clock,
        None if checks.empty else checks,
        runner,
    )


def _modes(
    settings: Settings, channels: Channels, tables: Tables, publisher: VerdictPublisher
) -> ModeHandler | None:
    """The modes agent's handler (None: modes off, or no channel for them); the publisher then
    sends each final verdict's mode to it."""
    if not (settings.modes_enabled and settings.enabled):
        return None
    if channels.mode_runs is None or channels.modes is None:
        return None
    publisher.mode_runs = channels.mode_runs
    times = ModeTimes(
        window_s=settings.modes_window_s,
        history_s=max(settings.modes_history_s, 2 * settings.modes_window_s),
        min_runs=settings.modes_min_runs,
        jump=settings.modes_jump,
        learn_s=settings.modes_learn_s,
        max_modes=settings.modes_max_per_agent,
    )
    return ModeHandler(tables.modes, channels.modes, times, publisher.metrics)


def _sessions(
    settings: Settings,
    channels: Channels,
    tables: Tables,
    publisher: VerdictPublisher,
    judging: Judging,
    closer: WindowCloser,
    judge_jobs: JudgeJobHandler | None,
) -> SessionHandler | None:
    """The session agent's handler (None: sessions off, or no channel for them); the closer
    then sends each closed request of a session to it as a turn."""
    if not (settings.sessions_enabled and settings.enabled):
        return None
    if channels.session_turns is None or channels.sessions is None:
        return None
    closer.session_turns = channels.session_turns
    checks = settings.check_book()
    return SessionHandler(
        tables.sessions,
        SessionOutputs(
            channels.sessions,
            channels.alerts,
            channels.reflections,
            publisher.lookup,
            publisher.agreement,
        ),
        SessionTimes(
            settings.session_idle_s,
            settings.session_end_grace_s,
            settings.session_retention_s,
            settings.session_max_turns,
        ),
        judging.policy,
        judging.version,
        publisher.metrics,
        closer.clock,
        checks=None if checks.empty else checks,
        check_runner=closer.check_runner,
        reader=_session_reader(settings, channels.session_turns, judge_jobs, publisher, judging),
    )


def _session_reader(
    settings: Settings,
    turns: Channel,
    judge_jobs: JudgeJobHandler | None,
    publisher: VerdictPublisher,
    judging: Judging,
) -> SessionReader | None:
    """The LLM judge's reading of sessions' turns: where this worker judges (the judge stage's
    client, limits, cache and budget), unless turned off."""
    if judge_jobs is None or judging.llm is None or not settings.llm_judge_sessions:
        return None
    return SessionReader(
        judge_jobs.stage,
        turns,
        judging.llm.max_input_chars,
        judging.llm.max_input_tokens,
        publisher.metrics,
        time.time,
    )
