"""One idempotent logging set-up, called by the command line only."""

from __future__ import annotations

import logging

_CONFIGURED = False


def setup_logging(level: str = "info") -> None:
    global _CONFIGURED
    if _CONFIGURED:
        return
    _CONFIGURED = True
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # aiokafka is chatty about every group join at INFO.
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
