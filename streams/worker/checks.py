"""A team's checks, run behind a wall within their time limit.

Checks are the team's code: any of them may raise, hang, spin the CPU or answer nonsense. A
code check runs in a check process (judges/checks/wall.py), a few of which the worker starts
(`TRACEJUDGE_CHECK_PROCESSES`); the checks without code (tool names, the user's yes, patterns
compiled by RE2, which runs in linear time) are ours, bounded, and run in place (`Check.inline`).
A run's checks together get `TRACEJUDGE_CHECK_TIMEOUT_S`; a check still running then is ended
with its process (a new one starts in its place), one not started yet is dropped, and the
verdict is made without them. Nothing a check does holds the worker's event loop: a check that
spins or backtracks for minutes holds its own process's GIL, not the worker's, so heartbeats,
the watchdog and every other request's verdict go on.

A check that raises, runs late, ends its process or answers something that is not a `Failure`
is counted in /metrics (`tracejudge_check_errors_total{check,how}`) and logged once per check
and kind; it never stops the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from tracejudge.judges.checks.api import Check, Failure
from tracejudge.judges.checks.apply import Checked
from tracejudge.judges.checks.view import Run
from tracejudge.judges.checks.wall import ANSWER_LIMIT, FRAME, findings_of, run_record
from tracejudge.streams.shared.metrics import Metrics

log = logging.getLogger(__name__)
PROCESSES = 2  # check processes by default: the machine's two cores
BENCH_MAX_S = 60.0  # the longest a check that ran past its limit is left out before a new try
START_S = 30.0  # how long a check process may take to start (import the team's modules)

# how a check could not say, as the verdict's reasons and the metric's label put it
RAISED, TIMED_OUT, BAD_ANSWER, ENDED = "raised", "timed out", "bad answer", "ended its process"
_LABELS = {RAISED: "raised", TIMED_OUT: "timeout", BAD_ANSWER: "bad_answer", ENDED: "ended"}


class _Ended(Exception):
    """The check process ended, or answered what is not a framed answer."""


class _NoProcess(Exception):
    """No check process was free before the run's checks ran out of time."""


class _Process:
    """One check process: started with `subprocess.Popen` (a fork and exec, milliseconds),
    its pipes read and written by the event loop. Not asyncio's subprocess API: its child
    watcher waits for a killed child on a thread, and a start cancelled at shutdown can wait
    there for good."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tracejudge.judges.checks.wall"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.WriteTransport | None = None

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        reader = self.reader = asyncio.StreamReader(limit=ANSWER_LIMIT + FRAME.size)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), self.proc.stdout)
        self.writer, _ = await loop.connect_write_pipe(asyncio.Protocol, self.proc.stdin)

    async def ask(self, job: bytes) -> Any:
        assert self.reader is not None and self.writer is not None
        try:
            if self.writer.is_closing():
                raise ConnectionError("the check process's input is closed")
            self.writer.write(FRAME.pack(len(job)) + job)
            head = await self.reader.readexactly(FRAME.size)
            (size,) = FRAME.unpack(head)
            if size > ANSWER_LIMIT:
                raise _Ended(f"an answer of {size} bytes")
            return orjson.loads(await self.reader.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError, struct.error) as exc:
            raise _Ended(repr(exc)) from exc
        except orjson.JSONDecodeError as exc:
            raise _Ended("an answer that is not JSON") from exc

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, OSError):
            self.proc.kill()
        if self.writer is not None:
            self.writer.close()
        # reaped now if it is gone already, else by `reap` later: never waited for here
        _KILLED.append(self.proc)
        reap()


_KILLED: list[subprocess.Popen[bytes]] = []


def reap() -> None:
    """Collect the killed check processes that have ended (no zombies left behind)."""
    _KILLED[:] = [p for p in _KILLED if p.poll() is None]


@dataclass
class CheckWall:
    """The check processes: started on first use, one killed and replaced when a check in it
    runs past its limit or breaks it."""

    processes: int = PROCESSES
    _idle: asyncio.Queue[_Process] | None = None
    _all: set[_Process] = field(default_factory=set)
    _starting: int = 0
    started: int = 0  # processes started, replacements included (tests and the log read it)
    _up: asyncio.Event = field(default_factory=asyncio.Event)  # set once one has started

    def _ensure(self) -> asyncio.Queue[_Process]:
        if self._idle is None:
            self._idle = asyncio.Queue()
        reap()
        while len(self._all) + self._starting < self.processes:
            self._starting += 1
            asyncio.get_running_loop().create_task(self._start())
        return self._idle

    async def _start(self) -> None:
        process: _Process | None = None
        try:
            process = _Process()
            await process.connect()
            hello = orjson.dumps({"path": sys.path})
            ready = await asyncio.wait_for(process.ask(hello), START_S)
            if not isinstance(ready, dict) or "ready" not in ready:
                raise _Ended("no ready message")
        except (OSError, _Ended, TimeoutError) as exc:
            log.error("a check process did not start (%r): trying again in 1 s", exc)
            if process is not None:
                process.kill()
            await asyncio.sleep(1.0)
            self._starting -= 1
            self._ensure()
            return
        except BaseException:
            if process is not None:
                process.kill()
            raise
        self._starting -= 1
        self.started += 1
        self._all.add(process)
        self._up.set()
        assert self._idle is not None
        self._idle.put_nowait(process)

    async def ready(self) -> None:
        """Until a check process is up (bounded): starting one (imports, the team's modules
        too) is not a check's time, and is not counted against its limit."""
        self._ensure()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._up.wait(), START_S)

    def _drop(self, process: _Process) -> None:
        process.kill()
        self._all.discard(process)
        self._ensure()  # a new one in its place

    async def call(self, target: str, run: bytes, deadline: float) -> Any:
        """The check's answer; raises TimeoutError past the deadline (its process killed, if
        it had started) and _Ended when the process ended under it."""
        idle = self._ensure()
        try:
            process = await asyncio.wait_for(idle.get(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise _NoProcess from None
        job = b'{"check":' + orjson.dumps(target) + b',"run":' + run + b"}"
        try:
            answer = await asyncio.wait_for(process.ask(job), max(0.0, deadline - time.monotonic()))
        except BaseException:
            self._drop(process)  # past its limit, ended, or the worker cancelled: not reused
            raise
        idle.put_nowait(process)
        return answer

    def close(self) -> None:
        for process in list(self._all):
            process.kill()
        self._all.clear()


@dataclass
class CheckRunner:
    timeout_s: float
    metrics: Metrics
    wall: CheckWall = field(default_factory=CheckWall)
    _said: set[tuple[str, str]] = field(default_factory=set)  # (check, how): logged once
    # (check, agent) -> (runs past the limit in a row, not called again before this monotonic
    # time): a check that hangs on every run would otherwise cost a process start per run, and
    # its neighbours their process meanwhile; per agent, so one agent's hang is not another's
    _benched: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)

    async def run(self, checks: tuple[Check, ...], run: Run) -> Checked:
        found: list[tuple[Check, Failure]] = []
        broken: list[tuple[str, str]] = []
        walled: list[Check] = []
        for check in checks:
            if not check.inline:
                walled.append(check)
                continue
            try:
                failures = check.failures(run)
            except Exception as exc:  # a bug of ours must not cost the verdict either
                self._broken(check, RAISED, repr(exc), broken)
                continue
            self._found(check, failures, found)
        if walled:
            await self.wall.ready()
            deadline = time.monotonic() + self.timeout_s
            record = orjson.dumps(run_record(run))
            agent = run.agent_name or ""
            answers = await asyncio.gather(
                *(self._walled(c, agent, record, deadline) for c in walled)
            )
            for check, (failures, how, detail) in zip(walled, answers, strict=True):
                if how:
                    self._broken(check, how, detail, broken)
                else:
                    self._found(check, failures, found)
        return Checked(tuple(found), tuple(broken))

    async def _walled(
        self, check: Check, agent: str, record: bytes, deadline: float
    ) -> tuple[list[Failure], str, str]:
        target = check.reachable
        if target is None:
            return [], RAISED, "not importable by module and name, as the check process needs"
        key = (check.name, agent)
        late, until = self._benched.get(key, (0, 0.0))
        if time.monotonic() < until:
            return [], TIMED_OUT, "ran past its limit on a run just before: not called for now"
        try:
            answer = await self.wall.call(target, record, deadline)
        except _NoProcess:  # its neighbours held every process: not the check's doing
            return [], TIMED_OUT, "no check process was free within the limit"
        except TimeoutError:
            # benched for twice as long at each hang in a row, at most a minute
            pause = min(BENCH_MAX_S, self.timeout_s * 2**late)
            self._benched[key] = (late + 1, time.monotonic() + pause)
            return [], TIMED_OUT, f"ran past {self.timeout_s:g} s: its process was ended"
        except _Ended as exc:
            return [], ENDED, str(exc)
        self._benched.pop(key, None)
        findings = findings_of(answer)
        if isinstance(findings, str):
            how = RAISED if findings.startswith("raised") else BAD_ANSWER
            if findings.startswith("cannot be imported"):
                how = RAISED
            return [], how, findings
        return findings, "", ""

    def _found(
        self, check: Check, failures: list[Failure], into: list[tuple[Check, Failure]]
    ) -> None:
        into += [(check, f) for f in failures]
        for failure in failures:
            self.metrics.check_failures.labels(check.name, failure.severity).inc()

    def _broken(self, check: Check, how: str, detail: str, into: list[tuple[str, str]]) -> None:
        into.append((check.name, how))
        label = _LABELS[how]
        self.metrics.check_errors.labels(check.name, label).inc()
        if (check.name, label) not in self._said:
            self._said.add((check.name, label))
            log.warning("check %s %s (%s): left out of the verdict", check.name, how, detail)

    def close(self) -> None:
        self.wall.close()
