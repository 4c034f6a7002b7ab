"""A closed run's team checks, run off the event loop within their time limit.

Checks are the team's code: any of them may raise, or hang. Each runs on a thread of a small
pool (the tool-name checks without code, ours and bounded, run in place: `Check.inline`);
together they get `TRACEJUDGE_CHECK_TIMEOUT_S`, after which the verdict is made without those
still running (Python cannot stop a thread: one that hangs keeps its pool thread, and is
counted). A check that raises or runs late is counted in /metrics and logged once by name; it
never stops the worker, and no verdict waits longer than the limit for it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from tracejudge.judges.checks.api import Check, Failure
from tracejudge.judges.checks.apply import Checked
from tracejudge.judges.checks.view import Run
from tracejudge.streams.metrics import Metrics

log = logging.getLogger(__name__)
THREADS = 4  # checks of different runs at once; a hung check holds one


_Job = tuple["Future[list[Failure]]", "Callable[[Run], list[Failure]]", Run]


class DaemonPool:
    """A few threads for the team's checks that never hold the process at exit: the standard
    ThreadPoolExecutor's threads are joined when the interpreter exits, so a check that hangs
    would keep a worker from stopping on SIGTERM (a rolling restart waiting for a kill -9)."""

    def __init__(self, threads: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[[Run], list[Failure]], run: Run) -> Future[list[Failure]]:
        future: Future[list[Failure]] = Future()
        self._jobs.put((future, fn, run))
        return future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, run = job
            if not future.set_running_or_notify_cancel():
                continue  # cancelled before it started
            try:
                future.set_result(fn(run))
            except BaseException as exc:  # the check's, handed to the caller
                future.set_exception(exc)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking jobs; `cancel_futures`: drop those not started; `wait`: until the
        threads are done (a hung check's never is: not waited for at exit)."""
        if cancel_futures:
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


@dataclass
class CheckRunner:
    timeout_s: float
    metrics: Metrics
    pool: DaemonPool = field(default_factory=lambda: DaemonPool(THREADS, "tracejudge-check"))
    _said: set[tuple[str, str]] = field(default_factory=set)  # (check, how): logged once
    # a check's call that ran past the limit and has not returned yet: the check is not called
    # again until it has, so one that hangs on every run holds one thread, not the whole pool
    _hung: dict[str, Future[list[Failure]]] = field(default_factory=dict)

    async def run(self, checks: tuple[Check, ...], run: Run) -> Checked:
        found: list[tuple[Check, Failure]] = []
        broken: list[tuple[str, str]] = []
        called: list[tuple[Check, Future[list[Failure]]]] = []
        for check in checks:
            if check.inline:
                try:
                    failures = check.failures(run)
                except Exception as exc:  # a bug of ours must not cost the verdict either
                    broken.append((check.name, "raised"))
                    self._count(check, "raised", repr(exc))
                    continue
                self._found(check, failures, found)
                continue
            hung = self._hung.get(check.name)
            if hung is not None and not hung.done():
                broken.append((check.name, "timed out"))
                self._count(check, "timeout", "still running from an earlier run")
                continue
            self._hung.pop(check.name, None)
            called.append((check, self.pool.submit(check.failures, run)))
        if called:
            await asyncio.wait([asyncio.wrap_future(f) for _, f in called], timeout=self.timeout_s)
        for check, future in called:
            if not future.done():
                # never started: dropped; started: runs on, its answer unread
                if not future.cancel():
                    self._hung[check.name] = future
                broken.append((check.name, "timed out"))
                self._count(check, "timeout", f"ran past {self.timeout_s:g} s")
                continue
            error = future.exception()
            if error is not None:
                broken.append((check.name, "raised"))
                self._count(check, "raised", repr(error))
                continue
            self._found(check, future.result(), found)
        return Checked(tuple(found), tuple(broken))

    def _found(
        self, check: Check, failures: list[Failure], into: list[tuple[Check, Failure]]
    ) -> None:
        into += [(check, f) for f in failures]
        for failure in failures:
            self.metrics.check_failures.labels(check.name, failure.severity).inc()

    def _count(self, check: Check, how: str, detail: str) -> None:
        self.metrics.check_errors.labels(check.name, how).inc()
        if (check.name, how) not in self._said:
            self._said.add((check.name, how))
            log.warning("check %s %s (%s): left out of the verdict", check.name, how, detail)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
