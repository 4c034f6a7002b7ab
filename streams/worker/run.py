"""Running the worker process: topics, app, bounded logs and a stop that always ends."""

from __future__ import annotations

import asyncio
import logging

from tracejudge.settings import Settings, changed_settings
from tracejudge.streams.judge.startup import log_judge_line
from tracejudge.streams.kafka import internals
from tracejudge.streams.kafka.admin import prepare_topics
from tracejudge.streams.shared.logs import quiet_library_logs, worker_logging_config
from tracejudge.streams.worker.app import create_app

log = logging.getLogger(__name__)


def run_worker(settings: Settings) -> int:
    try:
        internals.check()  # before anything connects: a library that changed under us
    except internals.InternalsChanged as exc:
        log.error("%s", exc)
        return 2
    log.info("settings other than the defaults: %s", changed_settings(settings))
    log_judge_line(settings)  # on (model, endpoint host, share judged) or off
    log.info("connecting to Kafka at %s", settings.kafka_bootstrap)
    created, replication = asyncio.run(prepare_topics(settings))
    log.info("topics ok (%d created)", len(created))
    # Faust declares its own topics (and any changelog not made above) with this factor
    settings = settings.model_copy(update={"replication_factor": replication.factor})
    log.info(
        "joining consumer group %s (the first assignment can take the broker's rebalance delay)",
        settings.app_id,
    )
    app = create_app(settings)
    quiet_library_logs()
    worker = internals.DeadlineWorker(
        app,
        loglevel=settings.log_level.upper(),
        logging_config=worker_logging_config(settings.log_level, settings.log_format),
        quiet=True,
        stop_timeout_s=settings.stop_timeout_s,
    )
    worker.execute_from_commandline()
    return 0
