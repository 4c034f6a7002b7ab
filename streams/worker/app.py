"""The Faust app factory: topics, tables, agents, timer, tasks and pages; wiring only.

What happens to a record is in the handlers (`events.py`, `responses.py`, `closing.py`,
`early_stop.py`, `judge/jobs.py`), which `context.py` builds; every consuming loop here
hands its records to the one error policy (`errors.py`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, cast

import faust
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from faust.types import TP

from tracejudge.models import names
from tracejudge.models.modes import ModeTick
from tracejudge.settings import Settings
from tracejudge.streams.agreement.calibrations import refresher_of
from tracejudge.streams.judge.consumer import JudgeRunner
from tracejudge.streams.kafka import internals, membership
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.kafka.security import SASL, client_options, ssl_context
from tracejudge.streams.sessions.scanner import SessionScanner
from tracejudge.streams.shared.commit import OffsetGuard
from tracejudge.streams.shared.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from tracejudge.streams.shared.outputs import Prompt, redis_client
from tracejudge.streams.shared.web_guard import PLAIN_HEADERS, host_allowed, host_names, refusal
from tracejudge.streams.worker import record_handoff
from tracejudge.streams.worker.context import Channels, Tables, WorkerContext
from tracejudge.streams.worker.debug import async_stacks
from tracejudge.streams.worker.health import health_report
from tracejudge.streams.worker.linger import BacklogLinger
from tracejudge.streams.worker.offsets import GroupOffsets
from tracejudge.streams.worker.stall_report import stall_report
from tracejudge.streams.worker.watchdog import StallWatchdog

log = logging.getLogger(__name__)
MODES_TICK_S = 15.0  # how often the modes agent looks for modes gone quiet

Handler = Callable[[InRecord], Awaitable[None]]


def _broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{host.strip()}" for host in bootstrap.split(",") if host.strip()]


def _faust_credentials(settings: Settings) -> Any:
    """`broker_credentials` for the Faust app (None: plaintext)."""
    protocol = settings.kafka_security_protocol
    if protocol == "SSL":
        return faust.SSLCredentials(ssl_context(settings))
    if protocol in SASL:
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password.get_secret_value(),
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=ssl_context(settings) if protocol == "SASL_SSL" else None,
        )
    return None


def _faust_app(settings: Settings) -> faust.App:
    timing: dict[str, Any] = {"broker_session_timeout": settings.broker_session_timeout_s}
    if settings.embedded_broker_timing:
        # Tansu waits the whole rebalance timeout on every group join: 6 s instead of 32 s.
        timing = dict(
            broker_rebalance_timeout=5, broker_session_timeout=6, broker_heartbeat_interval=1
        )
    return faust.App(
        settings.app_id,
        broker=_broker_urls(settings.kafka_bootstrap),
        broker_credentials=_faust_credentials(settings),
        # RocksDB keeps the tables on disk (one database per table partition under datadir),
        # with the offset of the last changelog record it holds: a restart on the same data
        # directory reads only the changelogs' tail instead of rebuilding every window.
        store="rocksdb://" if settings.table_store == "rocksdb" else "memory://",
        autodiscover=False,
        datadir=settings.data_dir,
        topic_partitions=settings.partitions,
        # chosen from the cluster by `prepare_topics` when not set (1: no topic is made here)
        topic_replication_factor=settings.replication_factor or 1,
        topic_allow_declare=True,
        processing_guarantee="at_least_once",
        # Records whose steps are held in memory stay unacknowledged (worker/windows.py):
        # a rebalance must not wait for them; they are read again by the next owner.
        stream_wait_empty=False,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        # Each closed window writes a changelog record; sent at once, each was a produce request
        # and a wake-up of the broker on the agent's thread. At 5,500 events/s a 5 ms linger
        # took the p50 verdict latency from 24-40 ms to 17-18 ms (BENCHMARKS.md).
        producer_linger=settings.producer_linger_ms / 1000,
        producer_max_request_size=settings.kafka_max_request_bytes,
        table_standby_replicas=0,
        web_enabled=True,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_port=settings.web_port,
        # Faust's own pages read table data (/table/{name}/{key}: whole, unmasked traces) and
        # internals: served only with TRACEJUDGE_DEBUG_ENDPOINTS, like /debug/tasks.
        web_tables_enabled=settings.debug_endpoints,
        web_router_enabled=settings.debug_endpoints,
        web_stats_enabled=settings.debug_endpoints,
        web_graph_enabled=settings.debug_endpoints,
        **timing,
    )


def create_app(settings: Settings) -> faust.App:
    """Build the worker's Faust app from settings; nothing is created at import time."""
    app = _faust_app(settings)

    events_topic, responses_topic, channels, tables = _topics_and_tables(app, settings)
    ctx = WorkerContext.build(
        settings, channels, tables, redis_client(settings.redis_url), hold_s=settings.step_hold_s
    )
    guard = _offset_guard(app, ctx)
    ctx.commits.admission = guard

    # Only a concurrency=1 agent may update tables (faust-streaming #606). Records are
    # acknowledged (and so committed) only by the commit rule (`streams/shared/commit.py`), which
    # also keeps every exception out of `async for`, where it would kill the agent silently.
    backlog = _backlog_linger(app, settings)
    ctx.metrics.readings.producer_linger = backlog.current_s

    @app.agent(events_topic, concurrency=1)  # type: ignore[misc]
    async def windows(stream: Any) -> None:
        async for event in stream.noack().events():
            ctx.liveness.last_progress = time.monotonic()
            record = InRecord.of_faust(event)
            backlog.seen(record.partition, record.offset)
            await ctx.commits.handle(record, ctx.events, event.ack)

    @app.agent(responses_topic, concurrency=1)  # type: ignore[misc]
    async def responses(stream: Any) -> None:
        async for event in stream.noack().events():
            ctx.liveness.last_progress = time.monotonic()
            await ctx.commits.handle(InRecord.of_faust(event), ctx.responses, event.ack)

    @app.timer(interval=settings.idle_check_interval_s)  # type: ignore[untyped-decorator]
    async def find_idle_windows() -> None:
        await ctx.idle.scan()

    @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
    async def repair_skipped_records() -> None:
        try:
            await guard.retry()
        except Exception:  # the next tick tries again
            log.exception("re-seeking a skipped range failed")

    @app.timer(interval=ctx.publisher.log.interval_s)  # type: ignore[untyped-decorator]
    async def log_verdicts() -> None:
        ctx.publisher.log.flush()

    refresher = refresher_of(settings, ctx.calibration_book, ctx.agreement)
    if refresher is not None:  # per-agent alert thresholds learned from outcomes

        @app.task  # type: ignore[untyped-decorator]
        async def calibrate() -> None:
            await refresher.run()  # never raises: a failed read keeps the book as it was

    _say_what_is_off(settings, ctx)
    live = ctx.live_agreement
    if live is not None:  # tracejudge_agreement_* on /metrics, from the shared tally

        @app.task  # type: ignore[untyped-decorator]
        async def agreement_figures() -> None:
            await live.run()  # never raises: a failed read keeps the last figures

    if not settings.debug_endpoints:
        # Faust's Monitor keeps statistics of every message, event and send for its /stats
        # page, served only with the debug endpoints; as a sensor it ran on each of them.
        @app.task  # type: ignore[untyped-decorator]
        async def without_faust_monitor() -> None:
            app.sensors.remove(app.monitor)

    _start_check_processes(app, ctx)
    _add_session_agent(app, ctx, channels)
    _add_modes_agent(app, ctx, channels)
    judge_runner = _add_judge_stage(app, ctx)
    _add_watchdog_and_pages(app, ctx, guard, judge_runner)
    _add_phase_logs(app, settings)
    return app


def _say_what_is_off(settings: Settings, ctx: WorkerContext) -> None:
    """At start, in the log: protections and capabilities this configuration leaves off."""
    if settings.control_key_set() is None and (
        settings.interventions_enabled or settings.early_stop_enabled
    ):
        log.warning(
            "interventions and early-stop decisions are not signed (TRACEJUDGE_CONTROL_KEYS is "
            "empty): anyone who can write to the control topic or to Redis can stop an agent "
            "(docs/security.md)"
        )
    if ctx.agreement is None:
        log.warning(
            "no Redis (TRACEJUDGE_REDIS_URL is empty): outcome events are counted, not "
            "joined to verdicts; no live agreement"
        )


def _topics_and_tables(app: faust.App, settings: Settings) -> tuple[Any, Any, Channels, Tables]:
    """The input topics, the output channels and the tables."""

    def topic(name: str) -> Any:
        return app.topic(
            settings.topic(name),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )

    def table(name: str, **serializers: Any) -> Any:
        options = {"driver": "rocksdict"} if settings.table_store == "rocksdb" else None
        return app.Table(
            name, default=None, partitions=settings.partitions, options=options, **serializers
        )

    events_topic, responses_topic = topic(names.EVENTS), topic(names.RESPONSES)
    channels = Channels(
        events=events_topic,
        judge_requests=topic(names.JUDGE_REQUESTS),
        evaluations=topic(names.EVALUATIONS),
        reflections=topic(names.REFLECTIONS),
        alerts=topic(names.ALERTS),
        # an agent waits on these: they do not wait out the linger
        retries=Prompt(topic(names.RETRIES), partial(_send_lingering, app)),
        control=Prompt(topic(names.CONTROL), partial(_send_lingering, app)),
        dlq=topic(names.DLQ),
        session_turns=topic(names.SESSION_TURNS),
        sessions=topic(names.SESSIONS),
        mode_runs=topic(names.MODE_RUNS),
        modes=topic(names.MODES),
    )
    tables = Tables(
        window_meta=table(names.WINDOW_META),
        # step records are encoded once by the store (records.py), stored and sent as bytes
        window_steps=table(names.WINDOW_STEPS, value_type=bytes),
        retry_state=table(names.RETRY_STATE),
        baselines=table(names.BASELINES),
        # a session's state, encoded by its store (sessions/state.py)
        sessions=table(names.SESSION_STATE, value_type=bytes),
        # an agent's failure modes, JSON (judges/modes/watch.py)
        modes=table(names.MODE_STATE, value_type=bytes),
    )
    return events_topic, responses_topic, channels, tables


def _backlog_linger(app: faust.App, settings: Settings) -> BacklogLinger:
    events = settings.topic(names.EVENTS)

    def highwater(partition: int) -> int | None:
        try:  # known once a fetch response for the partition came back
            end = app.consumer.highwater(TP(events, partition))
        except Exception:  # not assigned (any more), or the consumer not started
            return None
        return end if isinstance(end, int) else None

    def apply(seconds: float) -> bool:
        return internals.set_linger(internals.aiokafka_producer(app.producer), seconds)

    linger = BacklogLinger(
        settings.producer_linger_ms / 1000,
        settings.producer_backlog_linger_ms / 1000,
        highwater,
        apply,
        send_held=partial(_send_lingering, app),
    )

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def _revoked(sender: Any, *_: Any, **__: Any) -> None:
        linger.reset()

    return linger


def _send_lingering(app: faust.App) -> None:
    internals.send_lingering(internals.aiokafka_producer(app.producer))


def _offset_guard(app: faust.App, ctx: WorkerContext) -> OffsetGuard:
    group = GroupOffsets(client_options(ctx.settings), ctx.settings.app_id)

    async def seek(tp: tuple[str, int], offset: int) -> None:
        await app.consumer.seek(TP(*tp), offset)

    def forget_gap(tp: tuple[str, int]) -> None:
        internals.forget_gap(app.consumer, TP(*tp))

    async def position(tp: tuple[str, int]) -> int | None:
        try:  # aiokafka waits for a position being reset; revoked meanwhile, it raises
            return await asyncio.wait_for(app.consumer.position(TP(*tp)), POSITION_TIMEOUT_S)
        except (TimeoutError, KafkaError):
            return None

    return OffsetGuard(
        group.committed,
        seek,
        group.first_offset,
        ctx.metrics,
        forget_gap=forget_gap,
        position=position,
    )


Page = Callable[[Any, Any], Awaitable[Any]]  # a Faust page: (web, request) -> response
POSITION_TIMEOUT_S = 2.0
GC_YOUNG_THRESHOLD = 20_000  # allocations between young collections (Python's default: 700)


FETCH_MAX_WAIT_MS = 50
PREFETCH_BACKOFF_S = 0.02  # 5 ms cut the tail further but made steady load worse


def _shorten_fetch_wait(app: faust.App) -> None:
    """Under steady load faust's 1.5 s fetch wait was a 1.5 s verdict latency plateau with the
    worker not busy (measured at 1,400 events/s): see `internals.set_fetch_max_wait`."""
    try:
        internals.set_fetch_max_wait(app.consumer, FETCH_MAX_WAIT_MS, PREFETCH_BACKOFF_S)
    except AttributeError:  # not started yet: checked at start-up otherwise (internals.check)
        log.warning("cannot shorten the consumer's fetch wait yet")


def _add_phase_logs(app: faust.App, settings: Settings) -> None:
    """One line per phase of a start, so a worker joining its group is not silent."""
    phases: dict[str, bool] = {}

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def _assigned(sender: Any, assigned: Any, **_: Any) -> None:
        if not phases.get("assigned"):
            phases["assigned"] = True
            log.info(
                "assigned %d partitions; recovering tables from their changelogs", len(assigned)
            )

    @app.task  # type: ignore[untyped-decorator]
    async def ready() -> None:
        await app.tables.recovery.completed.wait()  # type: ignore[attr-defined]
        log.info("tables recovered; ready (GET /health answers 200 once consuming)")
        # What start-up made (modules, the app, the judges' tables) lives as long as the
        # process: out of the collector's sight, a full collection walks only what came since
        # (tens of milliseconds of pause less, straight into the verdict latency tail).
        gc.collect()
        gc.freeze()
        # Each event allocates a few hundred objects that live until its record is acknowledged
        # (a few milliseconds): at Python's default of a young collection every 700 allocations
        # most of them were walked once or twice before they died, ~2 % of the worker's CPU.
        # Collected 30 times less often, most die first; cycles wait a little longer.
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def _add_judge_stage(app: faust.App, ctx: WorkerContext) -> JudgeRunner | None:
    handler = ctx.judge_jobs
    if handler is None:
        return None

    async def judge_record(record: Any) -> None:
        await ctx.errors.run(InRecord.of_aiokafka(record), handler)

    settings = ctx.settings
    # jobs taken only while the judge's client has a call slot for them (`JudgeStage.room`)
    runner = JudgeRunner(
        settings, settings.topic(names.JUDGE_REQUESTS), judge_record, handler.stage.room
    )
    ctx.metrics.readings.judge_queue_lag = lambda: runner.queue_lag
    ctx.metrics.readings.judge_oldest_job_age = runner.oldest_age

    @app.task  # type: ignore[untyped-decorator]
    async def judging() -> None:
        try:
            await runner.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            ctx.errors.exit("the judge consumer stopped", exc)

    return runner


def _add_session_agent(app: faust.App, ctx: WorkerContext, channels: Channels) -> None:
    """Session verdicts: the session agent (one session's records in order, its state in a
    table: concurrency 1) and the timer that finds sessions idle, past an end's grace or
    past retention (docs/sessions.md). Sessions off: the topic is read and nothing kept."""
    handler = ctx.sessions
    turns = channels.session_turns
    if handler is None or turns is None:
        return
    scanner = SessionScanner(handler, turns, time.time)

    @app.agent(cast(Any, turns), concurrency=1)  # type: ignore[misc]
    async def sessions(stream: Any) -> None:
        async for event in stream.noack().events():
            ctx.liveness.last_progress = time.monotonic()
            await ctx.commits.handle(InRecord.of_faust(event), handler, event.ack)

    @app.timer(interval=ctx.settings.idle_check_interval_s)  # type: ignore[untyped-decorator]
    async def find_due_sessions() -> None:
        live = ctx.partitions
        if live.live_since and scanner.indexed_for != live.assignments:
            log.info("sessions read in from the table: %d", scanner.reindex(live.assignments))
        await scanner.scan()


def _add_modes_agent(app: faust.App, ctx: WorkerContext, channels: Channels) -> None:
    """Failure modes: the modes agent (one agent's verdicts in order, its modes in a table:
    concurrency 1) and the timer that finds modes gone quiet (docs/modes.md). Tables change
    only in stream iteration: the timer sends a tick keyed like the agent's runs."""
    handler = ctx.modes
    runs = channels.mode_runs
    if handler is None or runs is None:
        return

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def _revoked(sender: Any, *_: Any, **__: Any) -> None:
        handler.store.clear()  # read again from the table at the next record: another worker
        # may own some of its agents now, and write them

    @app.agent(cast(Any, runs), concurrency=1)  # type: ignore[misc]
    async def modes(stream: Any) -> None:
        async for event in stream.noack().events():
            ctx.liveness.last_progress = time.monotonic()
            await ctx.commits.handle(InRecord.of_faust(event), handler, event.ack)

    @app.timer(interval=MODES_TICK_S)  # type: ignore[untyped-decorator]
    async def find_quiet_modes() -> None:
        live = ctx.partitions
        if live.live_since and handler.indexed_for != live.assignments:
            log.info(
                "agents with loud failure modes read in: %d", handler.reindex(live.assignments)
            )
        now = time.time()
        try:
            for agent in handler.due(now):
                tick = ModeTick(agent_name=agent or None, at=now)
                await runs.send(key=agent.encode("utf-8"), value=tick.model_dump_json().encode())
        except Exception:  # the next tick tries again
            log.exception("sending mode ticks failed")


def _start_check_processes(app: faust.App, ctx: WorkerContext) -> None:
    """A team's check processes start with the worker, not on the first run that needs them:
    starting one (Python, the team's modules) takes a second on a busy box, which would be the
    first runs' verdicts' wait."""
    runner = ctx.events.closer.check_runner
    if runner is None:
        return

    @app.task  # type: ignore[untyped-decorator]
    async def check_processes() -> None:
        await runner.wall.ready()


def _add_watchdog_and_pages(
    app: faust.App, ctx: WorkerContext, guard: OffsetGuard, judge_runner: JudgeRunner | None
) -> None:
    settings = ctx.settings
    events = settings.topic(names.EVENTS)

    def offsets_seen(ends: dict[TopicPartition, int], committed: dict[TopicPartition, int]) -> None:
        # consumer lag per owned input partition, read by /metrics (a partition the group has
        # never committed on counts from offset 0)
        ctx.metrics.readings.lag = {
            (tp.topic, tp.partition): max(0, end - committed.get(tp, 0)) for tp, end in ends.items()
        }
        if app.rebalancing:
            ctx.partitions.lost()
            return
        ctx.partitions.observe(
            {tp.partition: end for tp, end in ends.items() if tp.topic == events},
            {tp.partition: off for tp, off in committed.items() if tp.topic == events},
        )

    inputs = {settings.topic(name) for name in names.INPUTS}
    watchdog = StallWatchdog(
        settings,
        sorted(inputs),
        owned=lambda: {TopicPartition(tp.topic, tp.partition) for tp in app.consumer.assignment()},
        last_progress=lambda: ctx.liveness.last_progress,
        on_offsets=offsets_seen,
        on_broker_lost=ctx.partitions.lost,
        processed=lambda: {TopicPartition(*tp): off for tp, off in guard.processed().items()},
        report=lambda: consumer_state(),
    )

    def consumer_state() -> str:
        owned = (tp for tp in app.consumer.assignment() if tp.topic in inputs)
        recovery = getattr(app.tables, "recovery", None)  # faust's TableManager has one
        return stall_report(app.consumer, guard, owned, recovery)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def _revoked(sender: Any, *_: Any, **__: Any) -> None:
        ctx.metrics.revocations.inc()
        ctx.store.unload()  # held records are dropped: read again by the next owner
        await ctx.commits.drain()  # what was handled is acknowledged before others take over
        ctx.partitions.revoked()
        guard.reset()

    @app.task  # type: ignore[untyped-decorator]
    async def watch_for_stalls() -> None:
        def stalled(reason: str) -> None:
            log.warning("the consumer at the stall:\n  %s", consumer_state())
            log.warning("where each task waits:\n%s", async_stacks(values=False))
            ctx.errors.exit(reason, RuntimeError("no progress on owned input partitions"))

        await watchdog.run(stalled)

    @app.on_rebalance_complete.connect  # type: ignore[arg-type]
    async def _assigned(sender: Any, **_: Any) -> None:
        ctx.liveness.assigned = True
        guard.assigned(
            (tp.topic, tp.partition) for tp in app.consumer.assignment() if tp.topic in inputs
        )
        _shorten_fetch_wait(app)
        record_handoff.install(app.consumer)
        internals.checked_new_offset(app.consumer)
        internals.commits_never_back(app.consumer)
        membership.stale_commits_keep_membership(app.consumer)

    _add_pages(app, ctx, watchdog, judge_runner)


def _add_pages(
    app: faust.App, ctx: WorkerContext, watchdog: StallWatchdog, judge_runner: JudgeRunner | None
) -> None:
    served = host_names(ctx.settings.allowed_hosts)

    def guarded(page: Page) -> Page:
        """A Host this worker does not serve gets 421 (web_guard.py); every answer, the
        security headers."""

        async def answer(web: Any, request: Any) -> Any:
            if not host_allowed(request.headers.get("Host"), served):
                response = web.text(refusal(request.headers.get("Host")), status=421)
            else:
                response = await page(web, request)
            response.headers.update(PLAIN_HEADERS)
            return response

        return answer

    if ctx.settings.debug_endpoints:  # stacks can show data in flight: off unless asked for

        @app.page("/debug/tasks")  # type: ignore[misc]
        @guarded
        async def tasks(web: Any, request: Any) -> Any:
            return web.text(async_stacks())

    @app.page("/metrics")  # type: ignore[misc]
    @guarded
    async def metrics(web: Any, request: Any) -> Any:
        # the exposition format's type with its charset: a header, since aiohttp refuses a
        # charset in content_type
        return web.bytes(ctx.metrics.exposition(), headers={"Content-Type": METRICS_CONTENT_TYPE})

    @app.page("/health")  # type: ignore[misc]
    @guarded
    async def health(web: Any, request: Any) -> Any:
        body, status = health_report(
            ctx,
            recovered=app.tables.recovery.completed.is_set(),  # type: ignore[attr-defined]
            rebalancing=bool(app.rebalancing),
            stalled=watchdog.stalled_since is not None,
            broker_unreachable=watchdog.broker_unreachable(),
            judge=judge_runner,
            brokers=watchdog.brokers(),
        )
        return web.json(body, status=status)
