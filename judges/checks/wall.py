"""Team code behind a wall: the check process, and the messages it takes and gives.

A team's code check runs in a process of its own (started by the worker, streams), not on a
thread of the worker: a check that spins the CPU or a regular expression that backtracks for
minutes holds the GIL of whatever process runs it, and in the worker that would stop the event
loop that fires the check's time limit, sends Kafka heartbeats and runs the watchdog. In a
process of its own it can be killed at its limit, and the worker never waits on it.

What crosses the wall is JSON, framed by a 4-byte length: a job (`job`) names the check
(`module:function`, imported once per process) and carries the run (`run_record`), its texts
clipped but not masked (the check process masks what the check reads, lazily, as `StepView`
does in the worker). The answer (`answer_of`) carries the findings as plain values, which the
worker validates again (`findings_of`): nothing the team's code made is unpickled or trusted.
The team's `print`s go to the process's stderr, not into the answers.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import struct
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

import orjson

from tracejudge.judges.checks.api import (
    FAILURES_LIMIT,
    MESSAGE_LIMIT,
    SEVERITIES,
    Check,
    Failure,
)
from tracejudge.judges.checks.view import Run, StepView
from tracejudge.judges.masking.clipping import clip_whole

FRAME = struct.Struct(">I")
JOB_LIMIT = 256 * 1024 * 1024  # bytes of one framed message, either way: a bound, not a goal
ANSWER_LIMIT = 1024 * 1024  # an answer longer than this is the check's error


def run_record(run: Run) -> dict[str, Any]:
    """A run as the job carries it: texts clipped (as `StepView` would), not masked yet."""
    return {
        "request_id": run.request_id,
        "goal": run.goal,
        "agent_name": run.agent_name,
        "agent_version": run.agent_version,
        "final_answer": run.final_answer,
        "steps": [s.raw_record() for s in run.steps],
    }


def run_from_record(record: dict[str, Any]) -> Run:
    steps = tuple(
        StepView(
            int(index), kind, tool=tool, args=args, result=result, ok=ok, text=text, actor=actor
        )
        for index, kind, tool, args, result, ok, text, actor in record["steps"]
    )
    return Run(
        request_id=str(record["request_id"]),
        goal=record.get("goal"),
        agent_name=record.get("agent_name"),
        agent_version=record.get("agent_version"),
        final_answer=record.get("final_answer"),
        steps=steps,
    )


def answer_of(check: Check, run: Run) -> dict[str, Any]:
    """What the check found on the run, as the answer carries it; what it raised, in words."""
    try:
        found = check.failures(run)
    except Exception as exc:  # the team's: said, never raised further
        return {"error": clip_whole(f"raised {type(exc).__name__}: {exc}", MESSAGE_LIMIT)}
    return {"found": [[f.message[:MESSAGE_LIMIT], f.step, f.severity] for f in found]}


def findings_of(answer: object) -> list[Failure] | str:
    """The findings an answer carries, validated and clipped; or, for an answer that is not
    what a check may give, why (the check's error)."""
    if not isinstance(answer, dict):
        return "answered something that is not a check's answer"
    if "error" in answer:
        return clip_whole(str(answer["error"]), MESSAGE_LIMIT)
    found = answer.get("found")
    if not isinstance(found, list):
        return "answered something that is not a check's answer"
    out: list[Failure] = []
    for item in found[:FAILURES_LIMIT]:
        if not (isinstance(item, list) and len(item) == 3):
            return "returned a finding that is not a Failure"
        message, step, severity = item
        if not isinstance(message, str) or not message.strip():
            return "returned a Failure without a message"
        if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
            return f"returned a Failure whose step is not a step index: {step!r}"[:MESSAGE_LIMIT]
        if severity not in SEVERITIES:
            return "returned a Failure of an unknown severity"
        out.append(Failure(clip_whole(message, MESSAGE_LIMIT), step, severity))
    return out


def write_frame(stream: BinaryIO, value: object) -> None:
    data = orjson.dumps(value)
    stream.write(FRAME.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: BinaryIO, limit: int = JOB_LIMIT) -> Any:
    """The next message, or None at the end of the stream."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    if size > limit:
        raise ValueError(f"a message of {size} bytes")
    return orjson.loads(stream.read(size))


def _die_with_parent() -> None:
    # Linux: killed when the worker is, even while a check spins (stdin's end is read only
    # between jobs)
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def serve(jobs: BinaryIO, answers: BinaryIO) -> None:
    """Answer jobs until the worker closes the stream: each `{"check": "module:function",
    "run": {...}}` gets `answer_of`. A check that cannot be imported is its error."""
    loaded: dict[str, Check | str] = {}
    while True:
        job = read_frame(jobs)
        if job is None:
            return
        target = str(job.get("check", ""))
        if target not in loaded:
            loaded[target] = _load(target)
        check = loaded[target]
        if isinstance(check, str):
            write_frame(answers, {"error": check})
            continue
        write_frame(answers, answer_of(check, run_from_record(job["run"])))


def _load(target: str) -> Check | str:
    module, _, name = target.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
        fn: Callable[[Run], Any] = found
    except Exception as exc:  # the team's module, imported here too: its error is the check's
        return clip_whole(f"cannot be imported in the check process: {exc!r}", MESSAGE_LIMIT)
    return Check(name=target, fn=fn)


def main() -> None:
    """The check process: the worker's sys.path first (its first message), then jobs."""
    _die_with_parent()
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the team's prints go to stderr, never into the answers
    sys.stdout = sys.stderr
    jobs = sys.stdin.buffer
    hello = read_frame(jobs)
    if not isinstance(hello, dict):
        return
    sys.path[:] = [str(p) for p in hello.get("path", [])] or sys.path
    write_frame(answers, {"ready": os.getpid()})
    serve(jobs, answers)


if __name__ == "__main__":
    main()
