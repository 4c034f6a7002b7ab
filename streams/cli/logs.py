"""One idempotent logging set-up, called by the command line only."""

from __future__ import annotations

import logging
from typing import Any

from tracejudge.judges.redact import mask

_CONFIGURED = False


def setup_logging(level: str = "info") -> None:
    global _CONFIGURED
    if _CONFIGURED:
        return
    _CONFIGURED = True
    mask_log_records()
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # aiokafka is chatty about every group join at INFO.
    logging.getLogger("aiokafka").setLevel(logging.WARNING)


def mask_log_records() -> None:
    """Mask every log record as it is made, whichever logger or handler it goes to (Faust's
    worker installs handlers of its own): the message with its arguments, and the traceback
    of an exception, whose message may quote the input."""
    make = logging.getLogRecordFactory()
    if getattr(make, "masks", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            # the template stays known, for filters that group records by it (quiet_logs.py)
            record.template = record.msg
            record.msg, record.args = mask(record.getMessage()), None
            if record.exc_info and not record.exc_text:
                record.exc_text = mask(logging.Formatter().formatException(record.exc_info))
        except Exception:  # a log call must never raise; keep the record as it was made
            pass
        return record

    factory.masks = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
