"""Bounded logging when things go wrong: the same library warning at most once per period.

With the broker gone, aiokafka logs an ERROR line per fetch attempt (about 300 a second were
seen); the first of a kind is kept, the rest are counted and reported with the next one let
through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

LIBRARIES = ("aiokafka", "faust", "mode")
PERIOD_S = 10.0


class RepeatFilter(logging.Filter):
    """Lets one record per (logger, message template) through per `period_s`; the record after
    a quiet period says how many were suppressed."""

    def __init__(self, period_s: float = PERIOD_S, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.period_s = period_s
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, str(record.msg))  # the template, not the formatted text
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.period_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._last[key] = now
        suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            record.msg = f"{record.msg} [{suppressed} like it suppressed in {self.period_s:g}s]"
        return True


def quiet_library_logs(period_s: float = PERIOD_S) -> RepeatFilter:
    """Attach one filter to every logger of the libraries that exists now (they are created at
    import, so call this after the app is built)."""
    repeat = RepeatFilter(period_s)
    for name in list(logging.Logger.manager.loggerDict):
        if name.split(".")[0] in LIBRARIES:
            logging.getLogger(name).addFilter(repeat)
    return repeat
