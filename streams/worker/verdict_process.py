"""The verdict process: `make_verdict` on a core of its own, fed through two pipes.

The worker writes each closed window to the child's stdin and reads the verdicts back from its
stdout, on the event loop, in the order it asked for them. No thread sits in between: the
standard process pool moved every call through a feeder and a manager thread, and each of those
hand-offs waited for the busy agent to let go of the GIL (up to the 5 ms switch interval), which
under load was much of a verdict's latency.

Frames as in `child.py`. The first frame to the child is `Judging`; it answers `None` once its
judges are loaded, then one `(ok, Made | exception)` per `Closing`.
"""

from __future__ import annotations

import asyncio
import gc
from collections import deque
from typing import Any

from tracejudge.judges.rules import RuleJudge
from tracejudge.streams.worker.child import (
    ChildDied,
    ChildProcess,
    child_pipes,
    frame,
    portable,
    read_frame,
)
from tracejudge.streams.worker.verdict_making import Closing, Judging, Made, make_verdict


class VerdictProcessDied(ChildDied):
    """The verdict process exited; the verdicts it owed are not made (their records come again
    once the worker restarts)."""


class ProcessMaker(ChildProcess):
    """Verdicts made in one child process, in the order they were asked for. A child that dies
    makes every call waiting on it raise `VerdictProcessDied`."""

    serve = "tracejudge.streams.worker.verdict_process:serve"
    name = "the verdict process"
    died = VerdictProcessDied

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self._waiting: deque[asyncio.Future[Any]] = deque()

    def _expect_ready(self) -> asyncio.Future[Any]:
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append(ready)
        return ready

    async def __call__(self, closing: Closing) -> Made:
        await self._started_and_alive()
        answer: asyncio.Future[Made] = asyncio.get_running_loop().create_future()
        self._waiting.append(answer)  # before writing: the answer may come back at once
        try:
            await self._send(closing)
        except VerdictProcessDied:
            answer.cancel()  # nobody waits for it any more
            raise
        return await answer

    def _answered(self, answer: Any) -> None:
        waiter = self._waiting.popleft()
        if waiter.done():  # its caller was cancelled
            return
        if answer is None or answer[0]:
            waiter.set_result(None if answer is None else answer[1])
        else:
            waiter.set_exception(answer[1])

    def _fail_all(self, exc: ChildDied) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(exc)


def serve() -> None:
    """The child's loop: one verdict per closed window read, until stdin closes (the worker
    stopped or died: the pipe closes either way, so the child never outlives it)."""
    stdin, stdout = child_pipes()
    judging = read_frame(stdin)
    if judging is None:
        return
    rules = RuleJudge(tool_call_budget=judging.tool_call_budget)
    _settle()
    try:
        stdout.write(frame(None))
        stdout.flush()
        first = True
        while (closing := read_frame(stdin)) is not None:
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
        return frame((True, make_verdict(judging, closing, rules)))
    except Exception as exc:  # the caller decides what a failed verdict means
        return frame((False, portable(exc)))
