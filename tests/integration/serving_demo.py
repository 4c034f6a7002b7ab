"""`tracejudge demo --serve` as a process a test drives: its output read line by line while it
serves, stopped with Ctrl-C at the end (killed if it does not stop)."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from tests.realservices import ROOT

T = TypeVar("T")


class ServingDemo:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.seen: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        out = process.stdout
        assert out is not None

        def read() -> None:
            for line in out:
                self._lines.put(line)

        threading.Thread(target=read, daemon=True).start()

    @property
    def output(self) -> str:
        return "".join(self.seen)

    def wait_for(self, found: Callable[[str], T | None], timeout_s: float) -> T:
        """The first non-empty `found(line)` of the lines printed so far or next; the demo's
        output so far in the failure when it exits or the time runs out first."""
        for line in self.seen:
            result = found(line)
            if result:
                return result
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=1)
            except queue.Empty:
                assert self.process.poll() is None, f"the demo exited:\n{self.output}"
                continue
            self.seen.append(line)
            result = found(line)
            if result:
                return result
        raise AssertionError(f"not printed within {timeout_s}s:\n{self.output}")


@contextmanager
def serving_demo(env: dict[str, str]) -> Iterator[ServingDemo]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tracejudge.streams.cli", "demo", "--serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield ServingDemo(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
