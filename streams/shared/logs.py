"""Logging, one module for the command line, the worker and its processes.

One idempotent set-up (`setup_logging`), the JSON line format (TRACEJUDGE_LOG_FORMAT=json) also
handed to Faust's worker, which sets logging up again (`worker_logging_config`), masked records
whatever logger or handler they go to, and bounded library logs when things go wrong: the same
library warning at most once per period (with the broker gone, aiokafka logs an ERROR line per
fetch attempt, about 300 a second were seen; the first of a kind is kept, the rest are counted
and reported with the next one let through).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from tracejudge.judges.masking.redact import mask
from tracejudge.streams.shared.visible import visible_log


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line (TRACEJUDGE_LOG_FORMAT=json), for log shippers: time, level,
    logger, message (masked like every record) and the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exc"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def worker_logging_config(level: str, fmt: str) -> dict[str, Any] | None:
    """Faust's worker sets logging up again; with the JSON format it gets this dictConfig."""
    if fmt != "json":
        return None
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonLogFormatter}},
        "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "json"}},
        "root": {"level": level.upper(), "handlers": ["default"]},
    }


_CONFIGURED = False
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    global _CONFIGURED
    if _CONFIGURED:
        return
    _CONFIGURED = True
    mask_log_records()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    # aiokafka is chatty about every group join at INFO, httpx about every request.
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)


class MaskedLogRecord(logging.LogRecord):
    """A log record whose text is masked when a handler formats it: the message with its
    arguments, and the traceback of an exception, whose message may quote the input. Lazy, so
    that the many debug records libraries make and no handler emits cost nothing."""

    _masked: str | None = None
    _exc_text: str | None = None

    def getMessage(self) -> str:
        if self._masked is None:
            self._masked = visible_log(mask(super().getMessage()))
        return self._masked

    @property  # type: ignore[override]
    def exc_text(self) -> str | None:
        if self._exc_text is None and self.exc_info:
            self._exc_text = visible_log(mask(logging.Formatter().formatException(self.exc_info)))
        return self._exc_text

    @exc_text.setter
    def exc_text(self, value: str | None) -> None:
        self._exc_text = value


def mask_log_records() -> None:
    """Every log record, whichever logger or handler it goes to (Faust's worker installs
    handlers of its own), is a MaskedLogRecord."""
    logging.setLogRecordFactory(MaskedLogRecord)


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
