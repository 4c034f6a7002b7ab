"""What the worker's child processes (verdicts, judge calls) share: how they start, how
objects cross the pipes, and what a dead child means.

A frame is a 4-byte big-endian length and a pickle. The child imports what the worker imports
(the worker's `sys.path`), reads frames from its stdin and writes frames to its stdout; it ends
when its stdin closes, so it never outlives the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import pickle
import signal
import struct
import sys
from collections.abc import Callable
from typing import IO, Any, ClassVar

LENGTH = struct.Struct(">I")


class ChildDied(RuntimeError):
    """A child process exited; what it owed is not made (its input records are not
    acknowledged and come again once the worker restarts)."""


def frame(obj: object) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return LENGTH.pack(len(body)) + body


def portable(exc: BaseException) -> BaseException:
    """`exc` if it survives the pipe, else a RuntimeError with its text: an exception that
    pickles but cannot be rebuilt would make the worker read the child's answers as unreadable
    and exit, and the record that caused it would come back and do it again."""
    try:
        pickle.loads(pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc!r}")
    return exc


async def spawn(serve: str) -> asyncio.subprocess.Process:
    """Start `python -c "from <module> import <function>; <function>()"` for `serve`
    ("module:function") with both pipes."""
    module, function = serve.split(":")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
        f"from {module} import {function}; {function}()",
        json.dumps(sys.path),  # the child imports what the worker imports
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )


async def read_answer(stdout: asyncio.StreamReader) -> Any:
    """The child's next frame (IncompleteReadError once it is gone)."""
    (length,) = LENGTH.unpack(await stdout.readexactly(LENGTH.size))
    return pickle.loads(await stdout.readexactly(length))  # our own child, a private pipe


class ChildProcess:
    """The worker's side of one child: started once (`setup` is its first frame; it answers
    `None` when ready), fed on stdin and read on stdout on the event loop. Subclasses say how
    an answer finds its caller (`_answered`) and fail every waiting caller when the child
    is gone (`_fail_all`)."""

    serve: ClassVar[str]  # "module:function" the child runs
    name: ClassVar[str]  # "the verdict process", in errors
    died: ClassVar[type[ChildDied]]

    def __init__(self, setup: object) -> None:
        self._setup = setup
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """Start the child and wait until it is ready (a second or two)."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._spawn())
        await asyncio.shield(self._started)

    async def _spawn(self) -> None:
        self._process = await spawn(self.serve)
        ready = self._expect_ready()
        self._reader = asyncio.ensure_future(self._read())
        await self._send(self._setup)
        await ready

    def _expect_ready(self) -> asyncio.Future[Any]:
        raise NotImplementedError

    def _answered(self, answer: Any) -> None:
        raise NotImplementedError

    def _fail_all(self, exc: ChildDied) -> None:
        raise NotImplementedError

    async def _started_and_alive(self) -> None:
        await self.start()
        if self._reader is None or self._reader.done():  # no one would read the answer
            raise self.died(f"{self.name} exited")

    async def _send(self, obj: object) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            # whole frames, written at once: concurrent senders do not interleave
            self._process.stdin.write(frame(obj))
            await self._process.stdin.drain()  # backpressure when the child falls behind
        except (ConnectionError, BrokenPipeError) as exc:
            raise self.died(f"{self.name} is gone") from exc

    async def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        why = f"{self.name} exited"
        try:
            while True:
                self._answered(await read_answer(self._process.stdout))
        except asyncio.IncompleteReadError:
            pass
        except Exception as exc:  # a frame out of step: this child's answers can't be trusted
            why = f"{self.name}'s answers are unreadable ({exc!r})"
            self._process.kill()
        finally:
            self._fail_all(self.died(why))

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


class CallingChild(ChildProcess):
    """A child whose calls carry an id, answered `(id, ok, value | exception)` in any order
    (`None` once it is ready): many calls in flight at once."""

    def __init__(self, setup: object) -> None:
        super().__init__(setup)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count()

    async def _call(self, obj: object) -> Any:
        await self._started_and_alive()
        call = next(self._ids)
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[call] = answer  # before writing: the answer may come back at once
        try:
            await self._send((call, obj))
            return await answer
        finally:
            self._waiting.pop(call, None)

    def _expect_ready(self) -> asyncio.Future[Any]:
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[-1] = ready
        return ready

    def _answered(self, answer: Any) -> None:
        call: int
        value: Any
        call, ok, value = (-1, True, None) if answer is None else answer
        waiter = self._waiting.pop(call, None)
        if waiter is None or waiter.done():  # its caller was cancelled
            return
        if ok:
            waiter.set_result(value)
        else:
            waiter.set_exception(value)

    def _fail_all(self, exc: ChildDied) -> None:
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(exc)
        self._waiting.clear()


async def frame_reader(stdin: IO[bytes]) -> asyncio.StreamReader:
    """In an asyncio child: its stdin, for `read_answer`."""
    reader = asyncio.StreamReader(limit=1 << 26)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    return reader


def frame_writer(stdout: IO[bytes]) -> Callable[[bytes], None]:
    """In an asyncio child: write one whole frame to the worker."""

    def answer(body: bytes) -> None:
        # whole frames, one thread: a blocking write (the worker is always reading)
        with contextlib.suppress(BrokenPipeError):  # the worker is gone; so are we, soon
            stdout.write(body)
            stdout.flush()

    return answer


def child_pipes() -> tuple[IO[bytes], IO[bytes]]:
    """In the child: its frame pipes. Ctrl-C reaches the worker, which ends the child; whatever
    else prints goes to stderr, never into the frames."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin = os.fdopen(os.dup(0), "rb", buffering=1 << 16)
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return stdin, stdout
