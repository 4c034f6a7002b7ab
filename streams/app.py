"""The Faust application factory: topics, tables, the window agent, the idle timer, /health."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NoReturn

import faust
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from tracejudge.judges.early_stop import EarlyStopPolicy, Round
from tracejudge.judges.early_stop import decide as decide_early
from tracejudge.judges.llm.prompt import build_input
from tracejudge.judges.retries import plan_retry
from tracejudge.judges.rules import RuleJudge
from tracejudge.judges.sampling import sampled
from tracejudge.judges.verdicts import (
    DISABLED,
    SKIPPED,
    Decision,
    JudgeJob,
    Policy,
    WindowFacts,
    decide,
    evaluator_version,
    stable_id,
)
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import Iteration, parse_event
from tracejudge.models.outputs import EarlyStopDecision
from tracejudge.models.responses import parse_model_response
from tracejudge.models.window import ClosedBy
from tracejudge.prompts import final_judge_prompt
from tracejudge.streams import topics
from tracejudge.streams.control import KEY as CONTROL_KEY
from tracejudge.streams.debug import async_stacks
from tracejudge.streams.judge_runner import JudgeRunner
from tracejudge.streams.judging import JudgeStage, judge_version
from tracejudge.streams.sinks import Emitter, RedisSink, encode, redis_client
from tracejudge.streams.watchdog import StallWatchdog
from tracejudge.streams.windows import Marker, WindowStore, is_terminal

log = logging.getLogger(__name__)

MARKER_HEADER = "tracejudge-marker"
# Re-send a marker only if the previous one has had this long to come back through the stream.
MARKER_RESEND_S = 30.0


@dataclass
class WorkerState:
    assigned: bool = False
    last_progress: float = field(default_factory=time.monotonic)
    counters: Counter[str] = field(default_factory=Counter)
    markers_sent: dict[str, float] = field(default_factory=dict)


def _die(reason: str, exc: BaseException) -> NoReturn:
    """Stop the process at once, committing nothing more.

    An exception escaping the agent would kill it while the worker looks healthy (Faust
    #175, #523); a graceful stop could commit the offset of the event that failed. Exiting
    hard lets the supervisor restart the worker and the event be delivered again.
    """
    log.critical("%s; exiting so that the event is redelivered after restart: %r", reason, exc)
    logging.shutdown()
    os._exit(70)


def _broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{host.strip()}" for host in bootstrap.split(",") if host.strip()]


def _headers(event: Any) -> dict[str, bytes]:
    raw = event.message.headers or ()
    items = raw.items() if isinstance(raw, dict) else raw
    return {k: (v if isinstance(v, bytes) else str(v).encode()) for k, v in items}


def create_app(settings: Any) -> faust.App:
    """Build the worker's Faust app from settings; nothing is created at import time."""
    timing: dict[str, Any] = {"broker_session_timeout": settings.broker_session_timeout_s}
    if settings.embedded_broker_timing:
        # Tansu waits the whole rebalance timeout on every group join: 6 s instead of 32 s.
        timing = dict(
            broker_rebalance_timeout=5, broker_session_timeout=6, broker_heartbeat_interval=1
        )
    app = faust.App(
        settings.app_id,
        broker=_broker_urls(settings.kafka_bootstrap),
        store="memory://",
        autodiscover=False,
        datadir=settings.data_dir,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        topic_allow_declare=True,
        processing_guarantee="at_least_once",
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        table_standby_replicas=0,
        web_enabled=True,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_port=settings.web_port,
        **timing,
    )
    state = WorkerState()

    def raw_topic(name: str) -> Any:
        return app.topic(
            settings.topic(name),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )

    events_topic = raw_topic(topics.INPUT)
    judge_topic = raw_topic(topics.JUDGE_REQUESTS)
    dlq_topic = raw_topic("dlq")
    emitter = Emitter(raw_topic("evaluations"), raw_topic("reflections"), raw_topic("alerts"))

    def table(name: str) -> Any:
        return app.Table(name, default=None, partitions=settings.partitions)

    store = WindowStore(
        meta=table("window-meta"),
        steps=table("window-steps"),
        seen=table("window-seen"),
        max_steps=settings.max_trace_steps,
    )
    rules = RuleJudge(tool_call_budget=settings.tool_call_budget)
    policy = Policy(
        warn_threshold=settings.warn_threshold,
        enable_reflection=settings.enable_reflection,
        max_reflection_rounds=settings.max_reflection_rounds,
        rule_weight=settings.rule_weight,
    )
    redis = redis_client(settings.redis_url)
    redis_sink = RedisSink(redis, settings.evaluation_ttl_s)
    judge: JudgeStage | None = None
    version = evaluator_version(rules.version)
    if settings.llm_judge_enabled:
        version = evaluator_version(rules.version, judge_version(settings, final_judge_prompt()))
        judge = JudgeStage(settings, redis, policy, version)

    async def publish(decision: Decision) -> None:
        await emitter.emit(decision)
        await redis_sink.put(decision.evaluation)
        evaluation = decision.evaluation
        state.counters["evaluations"] += 1
        state.counters[f"judge_{evaluation.judge_status}"] += 1
        if decision.reflection is not None:
            state.counters["reflections"] += 1
        state.counters["alerts"] += len(decision.alerts)
        log.info(
            "evaluated %s score=%d success=%s incomplete=%s closed_by=%s judge=%s",
            evaluation.request_id,
            evaluation.overall_score,
            evaluation.success,
            evaluation.incomplete,
            evaluation.closed_by,
            evaluation.judge_status,
        )

    async def close_window(request_id: str, closed_by: ClosedBy) -> None:
        now = time.time()
        window = store.collect(request_id, closed_by)
        verdict = rules.judge(window)
        facts = WindowFacts.of(window)
        if judge is not None and sampled(request_id, settings.llm_sample_rate):
            # The judge runs in its own consumer: this agent goes on closing windows meanwhile.
            job = JudgeJob(
                facts=facts,
                rules=verdict,
                content=build_input(window, settings.llm_max_input_chars).content,
                closed_at=now,
            )
            sent = await judge_topic.send(key=request_id.encode("utf-8"), value=encode(job))
            await sent
            state.counters["judge_queued"] += 1
        else:
            outcome = SKIPPED if judge is not None else DISABLED
            await publish(decide(facts, verdict, outcome, policy, version, now))
        store.close(request_id, closed_by, now)
        state.counters[f"closed_by_{closed_by}"] += 1

    control_topic = raw_topic("control")
    early_policy = EarlyStopPolicy(settings.min_iterations, settings.early_stop_consecutive)

    async def maybe_stop_early(request_id: str) -> None:
        window = store.collect(request_id, "final_response")
        rounds = [
            Round(
                r.iteration, r.max_iterations, r.response or "", r.observation or "", r.exec_success
            )
            for r in window.iterations
        ]
        found = decide_early(rounds, early_policy, store.early_actions(request_id))
        if found is None:
            return
        decision = EarlyStopDecision(
            decision_id=stable_id("early_stop", request_id, str(found.iteration), found.action),
            request_id=request_id,
            iteration=found.iteration,
            action=found.action,
            reason=found.reason,  # type: ignore[arg-type]
            evidence=found.evidence,
            ts=time.time(),
        )
        sent = await control_topic.send(key=request_id.encode("utf-8"), value=encode(decision))
        await sent
        await redis_sink.put_at(CONTROL_KEY.format(request_id=request_id), decision)
        store.record_early(request_id, found.action, found.iteration)
        state.counters[f"early_{found.action}"] += 1

    async def handle_marker(request_id: str, marker: Marker) -> None:
        now = time.time()
        state.markers_sent.pop(request_id, None)
        if not store.marker_applies(
            request_id, marker, now, settings.idle_timeout_s, settings.closed_retention_s
        ):
            return
        if marker == "idle_close":
            await close_window(request_id, "idle_timeout")
        else:
            store.purge(request_id)
            state.counters["purged"] += 1

    async def handle(event: Any) -> None:
        marker = _headers(event).get(MARKER_HEADER)
        if marker is not None:
            request_id = json.loads(event.value)["request_id"]
            await handle_marker(request_id, marker.decode())  # type: ignore[arg-type]
            return
        parsed = parse_event(event.value)
        status = store.add(parsed, event.message.partition, time.time())
        state.counters[f"events_{status}"] += 1
        if (
            settings.early_stop_enabled
            and isinstance(parsed, Iteration)
            and status != "late"
            and store.is_open(parsed.request_id)
        ):
            # also on a duplicate: a crash may have come between the event and its decision
            await maybe_stop_early(parsed.request_id)
        # A duplicate terminal event on an open window means the close it triggered never
        # finished (the worker died in between): finish it now.
        if is_terminal(parsed) and status != "late" and store.is_open(parsed.request_id):
            await close_window(parsed.request_id, "final_response")

    async def dead_letter(
        key: bytes | None, value: bytes | None, where: tuple[str, int, int], exc: Exception
    ) -> None:
        topic, partition, offset = where
        reason = exc.reason if isinstance(exc, InvalidEvent) else str(exc)
        code = exc.code if isinstance(exc, InvalidEvent) else type(exc).__name__
        headers = [
            ("tracejudge-error-class", code.encode()),
            ("tracejudge-error", reason[:1000].encode("utf-8", "replace")),
            ("tracejudge-original-topic", topic.encode()),
            ("tracejudge-original-partition", str(partition).encode()),
            ("tracejudge-original-offset", str(offset).encode()),
        ]
        fut = await dlq_topic.send(key=key, value=value, headers=headers)
        await fut
        state.counters["dead_lettered"] += 1
        state.counters[f"dead_lettered_{code}"] += 1
        log.warning("dead-lettered %s[%d]@%d: %s", topic, partition, offset, code)

    async def guarded(event: Any, handler: Any) -> None:
        """The error policy, per event: dead-letter and go on, or exit if Kafka is unusable."""
        try:
            await handler(event)
        except KafkaError as exc:
            _die("kafka failure while handling an event", exc)
        except Exception as exc:
            if not isinstance(exc, InvalidEvent):
                log.exception("unexpected error on an event; dead-lettering it")
            message = event.message
            where = (message.topic, message.partition, message.offset)
            try:
                await dead_letter(event.key, event.value, where, exc)
            except Exception as dlq_exc:
                _die("cannot dead-letter a message", dlq_exc)

    @app.agent(events_topic, concurrency=1)  # type: ignore[misc]
    async def windows(stream: Any) -> None:
        # Only a concurrency=1 agent may update tables (faust-streaming #606).
        async for event in stream.events():
            state.last_progress = time.monotonic()
            await guarded(event, handle)

    retries_topic = raw_topic("retries")
    retry_state = table("retry-state")

    async def handle_response(event: Any) -> None:
        response = parse_model_response(event.value)
        plan = plan_retry(response, settings.generic_max_retries, time.time())
        marks: list[str] = (retry_state.get(response.session_id) or {}).get("marks", [])
        if plan.fingerprint in marks:  # a redelivered answer: it was handled already
            state.counters["responses_duplicate"] += 1
            return
        key = response.session_id.encode("utf-8")
        pending = []
        if plan.retry is not None:
            pending.append(await retries_topic.send(key=key, value=encode(plan.retry)))
            state.counters[plan.retry.type] += 1
        if plan.alert is not None:
            pending.append(await emitter.alerts.send(key=key, value=encode(plan.alert)))
        await asyncio.gather(*pending)
        # written after delivery: a crash in between re-sends the same retry_id, never loses it
        retry_state[response.session_id] = {"marks": [*marks, plan.fingerprint][-32:]}
        state.counters["responses"] += 1

    @app.agent(raw_topic(topics.RESPONSES), concurrency=1)  # type: ignore[misc]
    async def responses(stream: Any) -> None:
        async for event in stream.events():
            state.last_progress = time.monotonic()
            await guarded(event, handle_response)

    if judge is not None:
        stage = judge

        async def judge_record(record: Any) -> None:
            try:
                job = JudgeJob.model_validate_json(record.value)
                await publish(await stage.judge(job))
            except KafkaError as exc:
                _die("kafka failure while publishing a judged verdict", exc)
            except Exception as exc:
                log.exception("cannot judge a job; dead-lettering it")
                where = (record.topic, record.partition, record.offset)
                try:
                    await dead_letter(record.key, record.value, where, exc)
                except Exception as dlq_exc:
                    _die("cannot dead-letter a message", dlq_exc)

        runner = JudgeRunner(settings, settings.topic(topics.JUDGE_REQUESTS), judge_record)

        @app.task  # type: ignore[untyped-decorator]
        async def judging() -> None:
            try:
                await runner.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _die("the judge consumer stopped", exc)

    @app.timer(interval=settings.idle_check_interval_s)  # type: ignore[untyped-decorator]
    async def find_idle_windows() -> None:
        # Tables can only change inside stream iteration, so the timer only sends a marker
        # keyed (and partitioned) like the window; the agent closes it in-stream.
        now = time.time()
        try:
            due = list(store.due(now, settings.idle_timeout_s, settings.closed_retention_s))
            for request_id, partition, marker in due:
                if now - state.markers_sent.get(request_id, 0.0) < MARKER_RESEND_S:
                    continue
                state.markers_sent[request_id] = now
                await events_topic.send(
                    key=request_id.encode("utf-8"),
                    value=json.dumps({"request_id": request_id}).encode(),
                    partition=partition,
                    headers=[(MARKER_HEADER, marker.encode())],
                )
        except Exception:
            # the next tick retries: markers are idempotent and re-checked in-stream
            state.counters["timer_errors"] += 1
            log.exception("idle-window scan failed")

    watchdog = StallWatchdog(
        settings,
        [settings.topic(topics.INPUT), settings.topic(topics.RESPONSES)],
        owned=lambda: {TopicPartition(tp.topic, tp.partition) for tp in app.consumer.assignment()},
        last_progress=lambda: state.last_progress,
    )

    @app.task  # type: ignore[untyped-decorator]
    async def watch_for_stalls() -> None:
        def stalled(reason: str) -> None:
            _die(reason, RuntimeError("no progress on owned input partitions"))

        await watchdog.run(stalled)

    @app.on_rebalance_complete.connect  # type: ignore[arg-type]
    async def _assigned(sender: Any, **_: Any) -> None:
        state.assigned = True

    @app.page("/debug/tasks")  # type: ignore[misc]
    async def tasks(web: Any, request: Any) -> Any:
        return web.text(async_stacks())

    @app.page("/health")  # type: ignore[misc]
    async def health(web: Any, request: Any) -> Any:
        recovered = app.tables.recovery.completed.is_set()  # type: ignore[attr-defined]
        stalled = watchdog.stalled_since is not None
        ready = state.assigned and recovered and not app.rebalancing and not stalled
        body = {
            "status": "ok" if ready else "stalled" if stalled else "starting",
            "assigned": state.assigned,
            "recovered": recovered,
            "rebalancing": bool(app.rebalancing),
            "redis": redis_sink.enabled,
            "redis_errors": redis_sink.errors,
            "counters": dict(state.counters),
        }
        return web.json(body, status=200 if ready else 503)

    return app
