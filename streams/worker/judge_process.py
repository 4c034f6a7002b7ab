"""The judge process: the LLM judge's calls, cache and verdicts in a process of their own.

A judged request costs the process that judges it an HTTP exchange, two Redis round trips, the
blend and the masking and encoding of its verdict; in the worker's main process that was 6% of
its time with a tenth of the requests judged (BENCHMARKS.md). Here the worker sends each job's
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
from typing import IO

from tracejudge.streams.judging.stage import JudgeStage
from tracejudge.streams.logs import setup_logging
from tracejudge.streams.settings import Settings
from tracejudge.streams.worker.child import (
    CallingChild,
    ChildDied,
    child_pipes,
    frame,
    frame_reader,
    frame_writer,
    portable,
    read_answer,
)
from tracejudge.streams.worker.judge_jobs import Judged, judge_with
from tracejudge.streams.worker.outputs import redis_client


class JudgeProcessDied(ChildDied):
    """The judge process exited; the jobs it had are not judged (they come again)."""


class JudgeProcess(CallingChild):
    """A `Judge` whose calls run in one child process, concurrently."""

    serve = "tracejudge.streams.worker.judge_process:serve"
    name = "the judge process"
    died = JudgeProcessDied

    def __init__(self, settings: Settings, version: str) -> None:
        super().__init__((settings, version))

    async def __call__(self, raw: bytes) -> Judged:
        judged: Judged = await self._call(raw)
        return judged

    async def aclose(self) -> None:
        """Stop the child; calls in flight are dropped (their jobs are not committed)."""
        await self.close()


def serve() -> None:
    """The child: judge calls as they come, many at once, until stdin closes (the worker
    stopped or died; the jobs in flight are not committed and come again)."""
    stdin, stdout = child_pipes()
    asyncio.run(_serve(stdin, stdout))


async def _serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    reader = await frame_reader(stdin)
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

    answer = frame_writer(stdout)

    async def judge(call: int, raw: bytes) -> None:
        try:
            body = frame((call, True, await judge_with(stage, raw)))
        except Exception as exc:  # the worker decides what a failed call means
            body = frame((call, False, portable(exc)))
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
