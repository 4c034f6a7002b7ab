"""Running the worker process: topics, app, bounded logs and a stop that always ends."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from typing import Any

import faust

from tracejudge.streams.kafka.admin import ensure_topics
from tracejudge.streams.settings import Settings
from tracejudge.streams.worker.app import create_app
from tracejudge.streams.worker.log_format import worker_logging_config
from tracejudge.streams.worker.quiet_logs import quiet_library_logs

log = logging.getLogger(__name__)


class Worker(faust.Worker):  # type: ignore[misc]
    """Faust's worker, with a deadline on the graceful stop.

    With the broker gone, a graceful stop can wait on commits and flushes for a long time; a
    supervisor then kills the worker anyway. Exiting at the deadline is as safe: what was not
    committed is delivered again.
    """

    def __init__(self, *args: Any, stop_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop_timeout_s = stop_timeout_s
        self._deadline: threading.Timer | None = None

    def _schedule_shutdown(self, signum: signal.Signals) -> None:
        if self._deadline is None:
            self._deadline = threading.Timer(self.stop_timeout_s, self._stop_now, (signum,))
            self._deadline.daemon = True
            self._deadline.start()
        super()._schedule_shutdown(signum)

    def _stop_now(self, signum: signal.Signals) -> None:
        log.warning(
            "%s: graceful stop not done after %.0fs; exiting now", signum.name, self.stop_timeout_s
        )
        logging.shutdown()
        os._exit(0)


def run_worker(settings: Settings) -> int:
    log.info("settings: %s", settings.masked())
    log.info("connecting to Kafka at %s", settings.kafka_bootstrap)
    created = asyncio.run(ensure_topics(settings))
    log.info("topics ok (%d created)", len(created))
    log.info(
        "joining consumer group %s (the first assignment can take the broker's rebalance delay)",
        settings.app_id,
    )
    app = create_app(settings)
    quiet_library_logs()
    worker = Worker(
        app,
        loglevel=settings.log_level.upper(),
        logging_config=worker_logging_config(settings.log_level, settings.log_format),
        quiet=True,
        stop_timeout_s=settings.stop_timeout_s,
    )
    worker.execute_from_commandline()
    return 0
