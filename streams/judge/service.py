"""`tracejudge judge`: the LLM judge stage as a process of its own.

A consumer of the judge-requests topic in its own group (`consumer.JudgeRunner`), scaled like
the worker, by running more of them. It judges each job, publishes the blended verdict through
the same `outputs.VerdictPublisher` as the worker, and commits a job's offset only once its
verdict's records are acknowledged. Workers then run with TRACEJUDGE_WORKER_JUDGES=false.

GET /health (200 once partitions are assigned) and GET /metrics on TRACEJUDGE_WEB_PORT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable
from typing import Any

from aiohttp import web
from aiokafka import AIOKafkaProducer

from tracejudge.judges.agreement.calibration import CalibrationBook
from tracejudge.models import names
from tracejudge.settings import Settings, changed_settings
from tracejudge.streams.agreement.calibrations import refresher_of
from tracejudge.streams.agreement.live import agreement_store
from tracejudge.streams.agreement.thresholds import alert_thresholds
from tracejudge.streams.judge.consumer import JudgeRunner
from tracejudge.streams.judge.jobs import JudgeJobHandler
from tracejudge.streams.judge.stage import JudgeStage, judging_version
from tracejudge.streams.judge.startup import log_judge_line
from tracejudge.streams.kafka.admin import ensure_topics
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.kafka.security import client_options
from tracejudge.streams.shared.errors import DeadLetters, ErrorPolicy
from tracejudge.streams.shared.evaluation_export import evaluation_exporter
from tracejudge.streams.shared.logs import quiet_library_logs
from tracejudge.streams.shared.metrics import CONTENT_TYPE, Metrics
from tracejudge.streams.shared.outputs import Headers, RedisSink, VerdictPublisher, redis_client

log = logging.getLogger(__name__)

# As long as the worker's producer waits for an acknowledgement: a broker outage holds verdicts
# back (their jobs stay uncommitted), it does not fail them.
REQUEST_TIMEOUT_MS = 1_200_000


class ProducerTopic:
    """A topic sent to with an aiokafka producer, in the worker's `Channel` shape: `send`
    returns once the record is buffered, with the broker's acknowledgement to await."""

    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self.producer = producer
        self.topic = topic

    async def send(
        self,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
    ) -> Awaitable[Any]:
        delivery: Awaitable[Any] = await self.producer.send(
            self.topic,
            value,
            key=key,
            partition=partition,
            headers=list(headers) if headers is not None else None,
        )
        return delivery


def producer(settings: Settings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        **client_options(settings),
        acks="all",
        linger_ms=int(settings.producer_linger_ms),
        max_request_size=settings.kafka_max_request_bytes,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
    )


def run_judge(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT; 0 on a clean stop (fatal errors exit 70 on their own)."""
    if not settings.llm_judge_enabled:
        log.error("the LLM judge is off: set TRACEJUDGE_LLM_BASE_URL (or _API_KEY)")
        return 2
    log.info("settings other than the defaults: %s", changed_settings(settings))
    log_judge_line(settings)  # model, endpoint host, share judged
    quiet_library_logs()  # aiokafka logs every reconnect attempt while the broker is away
    asyncio.run(_serve(settings))
    return 0


async def _serve(settings: Settings) -> None:
    created = await ensure_topics(settings)
    log.info("topics ok (%d created)", len(created))
    kafka = producer(settings)
    await kafka.start()
    redis = redis_client(settings.redis_url)
    metrics = Metrics()
    publisher = VerdictPublisher(
        ProducerTopic(kafka, settings.topic(names.EVALUATIONS)),
        ProducerTopic(kafka, settings.topic(names.REFLECTIONS)),
        ProducerTopic(kafka, settings.topic(names.ALERTS)),
        RedisSink(redis, settings.evaluation_ttl_s),
        metrics,
        exporter=evaluation_exporter(settings, metrics),
        # the verdicts judged here meet their outcomes in the worker's store
        agreement=agreement_store(settings, redis),
        followup_window_s=settings.action_followup_window_s,
        # the final verdicts judged here name their failure modes to the worker's modes agent
        mode_runs=ProducerTopic(kafka, settings.topic(names.MODE_RUNS))
        if settings.modes_enabled
        else None,
    )
    # its verdicts use the agents' calibrated thresholds too, refreshed as the worker's are
    book = CalibrationBook()
    stage = JudgeStage(settings, redis, settings.verdict_policy(book), judging_version(settings))
    refresher = refresher_of(settings, book, publisher.agreement)
    metrics.readings.alert_thresholds = lambda: alert_thresholds(book, settings, metrics.agents)
    handler = JudgeJobHandler(stage, publisher, metrics)
    metrics.readings.breaker_open = lambda: handler.breaker_open
    metrics.readings.rate_limit_waits = lambda: handler.rate_limit_waits
    errors = ErrorPolicy(
        DeadLetters(ProducerTopic(kafka, settings.topic(names.DLQ)), settings.dlq_payload, metrics)
    )

    async def judge_record(record: Any) -> None:
        await errors.run(InRecord.of_aiokafka(record), handler)

    # jobs taken only while the judge's client has a call slot for them (`JudgeStage.room`)
    runner = JudgeRunner(settings, settings.topic(names.JUDGE_REQUESTS), judge_record, stage.room)
    metrics.readings.judge_queue_lag = lambda: runner.queue_lag
    metrics.readings.judge_oldest_job_age = runner.oldest_age
    pages = await _pages(settings, runner, metrics)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running = asyncio.create_task(runner.run())
    calibrating = asyncio.create_task(refresher.run()) if refresher is not None else None
    log.info("judging %s as group %s", runner.topic, runner.group_id)
    try:
        while not (stop.is_set() or running.done()):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), publisher.log.interval_s)
            publisher.log.flush()
    finally:
        running.cancel()  # unfinished jobs are not committed: they come again
        with contextlib.suppress(asyncio.CancelledError):
            await running
        if calibrating is not None:
            calibrating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await calibrating
        await pages.cleanup()
        await kafka.stop()  # sends what is buffered
        await stage.aclose()
        if publisher.exporter is not None:
            await publisher.exporter.aclose()
        if redis is not None:
            await redis.aclose()
    if running.done() and not running.cancelled() and running.exception() is not None:
        errors.exit("the judge consumer stopped", running.exception() or RuntimeError())


async def _pages(settings: Settings, runner: JudgeRunner, metrics: Metrics) -> web.AppRunner:
    async def health(request: web.Request) -> web.Response:
        body: dict[str, Any] = {
            "status": "ok" if runner.assigned else "starting",
            "counters": dict(metrics.counts),
            "judge": {
                "assigned": runner.assigned,
                "queue_lag": runner.queue_lag,
                "oldest_job_age_s": round(runner.oldest_age(), 1),
            },
        }
        if not runner.assigned:
            body["waiting_for"] = ["judge consumer assigned"]
        return web.json_response(body, status=200 if runner.assigned else 503)

    async def exposition(request: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", exposition)
    pages = web.AppRunner(app, access_log=None)
    await pages.setup()
    await web.TCPSite(pages, settings.web_host, settings.web_port).start()
    return pages
