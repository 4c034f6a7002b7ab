"""A closed run's team checks, run off the event loop within their time limit.

Checks are the team's code: any of them may raise, or hang. Each runs on a thread of a small
pool; together they get `TRACEJUDGE_CHECK_TIMEOUT_S`, after which the verdict is made without
those still running (Python cannot stop a thread: one that hangs keeps its pool thread, and is
counted). A check that raises or runs late is counted in /metrics and logged once by name; it
never stops the worker, and no verdict waits longer than the limit for it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tracejudge.judges.checks.api import Check, Failure
from tracejudge.judges.checks.apply import Checked
from tracejudge.judges.checks.view import Run
from tracejudge.streams.metrics import Metrics

log = logging.getLogger(__name__)
THREADS = 4  # checks of different runs at once; a hung check holds one


@dataclass
class CheckRunner:
    timeout_s: float
    metrics: Metrics
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(THREADS, thread_name_prefix="tracejudge-check")
    )
    _said: set[tuple[str, str]] = field(default_factory=set)  # (check, how): logged once

    async def run(self, checks: tuple[Check, ...], run: Run) -> Checked:
        loop = asyncio.get_running_loop()
        futures = [loop.run_in_executor(self.pool, check.failures, run) for check in checks]
        _, pending = await asyncio.wait(futures, timeout=self.timeout_s)
        found: list[tuple[Check, Failure]] = []
        broken: list[tuple[str, str]] = []
        for check, future in zip(checks, futures, strict=True):
            if future in pending:
                future.cancel()  # never started: dropped; started: runs on, its answer unread
                broken.append((check.name, "timed out"))
                self._count(check, "timeout", f"ran past {self.timeout_s:g} s")
                continue
            error = future.exception()
            if error is not None:
                broken.append((check.name, "raised"))
                self._count(check, "raised", repr(error))
                continue
            failures = future.result()
            found += [(check, f) for f in failures]
            for failure in failures:
                self.metrics.check_failures.labels(check.name, failure.severity).inc()
        return Checked(tuple(found), tuple(broken))

    def _count(self, check: Check, how: str, detail: str) -> None:
        self.metrics.check_errors.labels(check.name, how).inc()
        if (check.name, how) not in self._said:
            self._said.add((check.name, how))
            log.warning("check %s %s (%s): left out of the verdict", check.name, how, detail)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
