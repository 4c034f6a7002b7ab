"""The verdict process: `make_verdict` on a core of its own, fed through two pipes.

The worker writes each closed window to the child's stdin and reads the verdicts back from its
stdout, on the event loop, in the order it asked for them. No thread sits in between: the
standard process pool moved every call through a feeder and a manager thread, and each of those
hand-offs waited for the busy agent to let go of the GIL (up to the 5 ms switch interval), which
under load was much of a verdict's latency.

A frame is a 4-byte big-endian length and a pickle. The first frame to the child is `Judging`;
it answers `None` once its judges are loaded, then one `(ok, Made | exception)` per `Closing`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import pickle
import signal
import struct
import sys
from collections import deque
from typing import IO, Any

from tracejudge.judges.rules import RuleJudge
from tracejudge.streams.worker.verdict_making import Closing, Judging, Made, make_verdict

_LENGTH = struct.Struct(">I")


class VerdictProcessDied(RuntimeError):
    """The verdict process exited; the verdicts it owed are not made (their records come again
    once the worker restarts)."""


def _frame(obj: object) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


class ProcessMaker:
    """Verdicts made in one child process, in the order they were asked for. A child that dies
    makes every call waiting on it raise `VerdictProcessDied`."""

    def __init__(self, judging: Judging) -> None:
        self._judging = judging
        self._process: asyncio.subprocess.Process | None = None
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._reader: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """Start the child and wait until its judges are loaded (a second or two)."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._spawn())
        await asyncio.shield(self._started)

    async def _spawn(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
            "from tracejudge.streams.worker.verdict_process import serve; serve()",
            json.dumps(sys.path),  # the child imports what the worker imports
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append(ready)
        self._reader = asyncio.ensure_future(self._read())
        await self._send(self._judging)
        await ready

    async def _send(self, obj: object) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            self._process.stdin.write(_frame(obj))
            await self._process.stdin.drain()  # backpressure when the child falls behind
        except (ConnectionError, BrokenPipeError) as exc:
            raise VerdictProcessDied("the verdict process is gone") from exc

    async def __call__(self, closing: Closing) -> Made:
        await self.start()
        if self._reader is None or self._reader.done():  # no one would read the answer
            raise VerdictProcessDied("the verdict process exited")
        answer: asyncio.Future[Made] = asyncio.get_running_loop().create_future()
        self._waiting.append(answer)  # before writing: the answer may come back at once
        try:
            await self._send(closing)
        except VerdictProcessDied:
            answer.cancel()  # nobody waits for it any more
            raise
        return await answer

    async def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        stdout = self._process.stdout
        why = "the verdict process exited"
        try:
            while True:
                (length,) = _LENGTH.unpack(await stdout.readexactly(_LENGTH.size))
                body = await stdout.readexactly(length)
                answer = pickle.loads(body)  # our own child, over a private pipe
                waiter = self._waiting.popleft()
                if waiter.done():  # its caller was cancelled
                    continue
                if answer is None or answer[0]:
                    waiter.set_result(None if answer is None else answer[1])
                else:
                    waiter.set_exception(answer[1])
        except asyncio.IncompleteReadError:
            pass
        except Exception as exc:  # a frame out of step: this child's answers can't be trusted
            why = f"the verdict process's answers are unreadable ({exc!r})"
            self._process.kill()
        finally:
            while self._waiting:
                waiter = self._waiting.popleft()
                if not waiter.done():
                    waiter.set_exception(VerdictProcessDied(why))

    async def close(self) -> None:
        """Stop the child (it ends when its stdin closes)."""
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


def _read_frame(stream: IO[bytes]) -> Any:
    """The next object the worker sent; None once its end of the pipe is closed."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(head)
    return pickle.loads(stream.read(length))  # from our own worker, over a private pipe


def serve() -> None:
    """The child's loop: one verdict per closed window read, until stdin closes (the worker
    stopped or died: the pipe closes either way, so the child never outlives it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the worker, which ends us
    stdin = os.fdopen(os.dup(0), "rb", buffering=1 << 16)
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever else prints goes to stderr, never into the frames
    judging = _read_frame(stdin)
    if judging is None:
        return
    rules = RuleJudge(tool_call_budget=judging.tool_call_budget)
    _settle()
    try:
        stdout.write(_frame(None))
        stdout.flush()
        first = True
        while (closing := _read_frame(stdin)) is not None:
            stdout.write(_answer(judging, closing, rules))
            stdout.flush()
            if first:  # what the first verdict loaded (detectors load lazily)
                _settle()
                first = False
    except BrokenPipeError:  # the worker is gone
        return


def _settle() -> None:
    """What is loaded by now (modules, patterns, schemas: ~100,000 objects) lives as long as the
    process: frozen, the collector stops walking it again and again, in pauses of 15-60 ms that
    went straight into verdict latency."""
    gc.collect()
    gc.freeze()


def _answer(judging: Judging, closing: Closing, rules: RuleJudge) -> bytes:
    try:
        answer: tuple[bool, Any] = (True, make_verdict(judging, closing, rules))
    except Exception as exc:  # the caller decides what a failed verdict means
        answer = (False, exc)
    try:
        return _frame(answer)
    except Exception:  # an exception that does not pickle
        return _frame((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]!r}")))
