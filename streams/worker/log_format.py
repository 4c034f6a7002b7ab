"""Log lines as JSON (TRACEJUDGE_LOG_FORMAT=json), for the CLI and for Faust's worker."""

from __future__ import annotations

import json
import logging
from typing import Any


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
