"""The judge process: the LLM judge's calls, cache and verdicts in a process of their own.

A judged request costs the process that judges it an HTTP exchange, two Redis round trips, the
blend and the masking and encoding of its verdict; in the worker's main process that was ~7% of
the window agent's time with a tenth of the requests judged. Here the worker sends each job's
bytes down a pipe and reads back the encoded verdict and what its metrics need (`Judged`); it
still consumes the jobs, commits them and publishes the verdicts (`judging/consumer.py`,
`outputs.py`), so at-least-once is decided in one place.

Frames as in `child.py`. The first frame to the child is `(Settings, version)`; it answers
`None` once its judge stage is built, then `(id, ok, Judged | exception)` per `(id, raw job)`,
in the order the calls finish (many are in flight at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
from typing import IO, Any

from tracejudge.streams.judging.stage import JudgeStage
from tracejudge.streams.settings import Settings
from tracejudge.streams.worker.child import (
    ChildDied,
    child_pipes,
    frame,
    read_answer,
    spawn,
)
from tracejudge.streams.worker.judge_jobs import Judged, judge_with
from tracejudge.streams.worker.logs import setup_logging
from tracejudge.streams.worker.outputs import redis_client


class JudgeProcessDied(ChildDied):
    """The judge process exited; the jobs it had are not judged (they come again)."""


class JudgeProcess:
    """A `Judge` whose calls run in one child process, concurrently."""

    def __init__(self, settings: Settings, version: str) -> None:
        self._setup = (settings, version)
        self._process: asyncio.subprocess.Process | None = None
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count()
        self._reader: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None
        self._write = asyncio.Lock()

    async def start(self) -> None:
        if self._started is None:
            self._started = asyncio.ensure_future(self._spawn())
        await asyncio.shield(self._started)

    async def _spawn(self) -> None:
        self._process = await spawn("tracejudge.streams.worker.judge_process:serve")
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[-1] = ready
        self._reader = asyncio.ensure_future(self._read())
        await self._send(self._setup)
        await ready

    async def _send(self, obj: object) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            async with self._write:  # drain() is not safe for concurrent writers
                self._process.stdin.write(frame(obj))
                await self._process.stdin.drain()
        except (ConnectionError, BrokenPipeError) as exc:
            raise JudgeProcessDied("the judge process is gone") from exc

    async def __call__(self, raw: bytes) -> Judged:
        await self.start()
        if self._reader is None or self._reader.done():
            raise JudgeProcessDied("the judge process exited")
        call = next(self._ids)
        answer: asyncio.Future[Judged] = asyncio.get_running_loop().create_future()
        self._waiting[call] = answer
        try:
            await self._send((call, raw))
            return await answer
        finally:
            self._waiting.pop(call, None)

    async def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        why = "the judge process exited"
        try:
            while True:
                answer = await read_answer(self._process.stdout)
                call: int
                value: Any
                call, ok, value = (-1, True, None) if answer is None else answer
                waiter = self._waiting.pop(call, None)
                if waiter is None or waiter.done():  # its caller was cancelled
                    continue
                if ok:
                    waiter.set_result(value)
                else:
                    waiter.set_exception(value)
        except asyncio.IncompleteReadError:
            pass
        except Exception as exc:  # a frame out of step: this child's answers can't be trusted
            why = f"the judge process's answers are unreadable ({exc!r})"
            self._process.kill()
        finally:
            for waiter in self._waiting.values():
                if not waiter.done():
                    waiter.set_exception(JudgeProcessDied(why))
            self._waiting.clear()

    async def aclose(self) -> None:
        """Stop the child (it ends when its stdin closes; calls in flight are dropped)."""
        if self._process is None:
            return
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            await asyncio.wait_for(self._process.wait(), 5.0)
        except TimeoutError:
            self._process.kill()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


def serve() -> None:
    """The child: judge calls as they come, many at once, until stdin closes (the worker
    stopped or died; the jobs in flight are not committed and come again)."""
    stdin, stdout = child_pipes()
    asyncio.run(_serve(stdin, stdout))


async def _serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    reader = asyncio.StreamReader(limit=1 << 26)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    try:
        settings, version = await read_answer(reader)
    except asyncio.IncompleteReadError:
        return
    setup_logging(settings.log_level, settings.log_format)
    stage = JudgeStage(
        settings, redis_client(settings.redis_url), settings.verdict_policy(), version
    )
    gc.collect()
    gc.freeze()  # what is loaded by now lives as long as the process (verdict_process.py)

    def answer(body: bytes) -> None:
        # whole frames, one thread: a blocking write (the worker is always reading)
        stdout.write(body)
        stdout.flush()

    async def judge(call: int, raw: bytes) -> None:
        try:
            body = frame((call, True, await judge_with(stage, raw)))
        except Exception as exc:  # the worker decides what a failed call means
            try:
                body = frame((call, False, exc))
            except Exception:  # an exception that does not pickle
                body = frame((call, False, RuntimeError(f"{type(exc).__name__}: {exc!r}")))
        with contextlib.suppress(BrokenPipeError):  # the worker is gone; so are we, soon
            answer(body)

    answer(frame(None))
    calls: set[asyncio.Task[None]] = set()
    try:
        while True:
            try:
                call, raw = await read_answer(reader)
            except asyncio.IncompleteReadError:  # the worker is gone
                return
            task = asyncio.create_task(judge(call, raw))
            calls.add(task)
            task.add_done_callback(calls.discard)
    except BrokenPipeError:
        return
    finally:
        for task in calls:
            task.cancel()
        with contextlib.suppress(Exception):
            await stage.aclose()
