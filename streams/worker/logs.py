"""One idempotent logging set-up, called by the command line and the judge process."""

from __future__ import annotations

import logging

from tracejudge.judges.redact import mask
from tracejudge.streams.worker.log_format import JsonLogFormatter

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
            self._masked = mask(super().getMessage())
        return self._masked

    @property  # type: ignore[override]
    def exc_text(self) -> str | None:
        if self._exc_text is None and self.exc_info:
            self._exc_text = mask(logging.Formatter().formatException(self.exc_info))
        return self._exc_text

    @exc_text.setter
    def exc_text(self, value: str | None) -> None:
        self._exc_text = value


def mask_log_records() -> None:
    """Every log record, whichever logger or handler it goes to (Faust's worker installs
    handlers of its own), is a MaskedLogRecord."""
    logging.setLogRecordFactory(MaskedLogRecord)
