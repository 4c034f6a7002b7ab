"""What the worker's child processes (verdicts, judge calls) share: how they start, how
objects cross the pipes, and what a dead child means.

A frame is a 4-byte big-endian length and a pickle. The child imports what the worker imports
(the worker's `sys.path`), reads frames from its stdin and writes frames to its stdout; it ends
when its stdin closes, so it never outlives the worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import struct
import sys
from typing import IO, Any

LENGTH = struct.Struct(">I")


class ChildDied(RuntimeError):
    """A child process exited; what it owed is not made (its input records are not
    acknowledged and come again once the worker restarts)."""


def frame(obj: object) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return LENGTH.pack(len(body)) + body


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


def read_frame(stream: IO[bytes]) -> Any:
    """In the child: the next object the worker sent; None once its end of the pipe closed."""
    head = stream.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    (length,) = LENGTH.unpack(head)
    return pickle.loads(stream.read(length))  # from our own worker, over a private pipe


def child_pipes() -> tuple[IO[bytes], IO[bytes]]:
    """In the child: its frame pipes. Ctrl-C reaches the worker, which ends the child; whatever
    else prints goes to stderr, never into the frames."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin = os.fdopen(os.dup(0), "rb", buffering=1 << 16)
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return stdin, stdout
