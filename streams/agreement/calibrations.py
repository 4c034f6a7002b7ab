"""Keeps a process's calibrated alert thresholds fresh: every TRACEJUDGE_CALIBRATION_REFRESH_S,
the agreement tally (merged over every process, `AgreementStore.tally`) is read and each
agent's calibration learned again (`judges/agreement/calibration.py`) into the book the
verdict policy reads. The worker and `tracejudge judge` both make verdicts, so both run one.

A failed read keeps the calibrations in force: they were learned from outcomes that are still
true, and a Redis outage must not flip every agent's threshold back and forth.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tracejudge.judges.agreement.calibration import (
    Calibration,
    CalibrationBook,
    CalibrationRule,
    calibrate_all,
)
from tracejudge.judges.agreement.tally import Tally
from tracejudge.settings import Settings

log = logging.getLogger(__name__)


class TallySource(Protocol):
    async def tally(self, since: float | None = None) -> Tally: ...


@dataclass
class CalibrationRefresher:
    source: TallySource
    book: CalibrationBook
    rule: CalibrationRule
    interval_s: float = 60.0
    clock: Callable[[], float] = time.time
    failures: int = 0  # tally reads that failed (the book kept as it was)
    refreshes: int = 0

    async def refresh(self) -> bool:
        """Learn the calibrations again; False (and the book unchanged) when the tally could
        not be read."""
        try:
            tally = await self.source.tally()
        except Exception as exc:  # any failure of the read: the next refresh tries again
            self.failures += 1
            log.warning("calibrations not refreshed (%d failures so far): %r", self.failures, exc)
            return False
        learned = calibrate_all(tally, self.rule, self.clock())
        _log_changes(self.book.by_agent, learned)
        self.book.replace(learned)
        self.refreshes += 1
        return True

    async def run(self) -> None:
        """Refresh now, then every `interval_s`, until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval_s)


def _log_changes(before: dict[str, Calibration], after: list[Calibration]) -> None:
    # one line when an agent's threshold changes (not every minute its counts grow)
    for c in after:
        old = before.get(c.agent)
        if old is None or old.threshold != c.threshold:
            log.info(
                "agent %s: alert threshold %d (was %s), from %d ok and %d failed outcomes",
                c.agent,
                c.threshold,
                "the default" if old is None else old.threshold,
                c.ok_runs,
                c.failed_runs,
            )
    for agent in before.keys() - {c.agent for c in after}:
        log.info("agent %s: calibration dropped (outcomes below the minimum)", agent)


def refresher_of(
    settings: Settings,
    book: CalibrationBook,
    source: TallySource | None,
    clock: Callable[[], float] = time.time,
) -> CalibrationRefresher | None:
    """The process's refresher, learning from `source` (the process's agreement store); None
    when calibration is off or there is no tally to learn from (no Redis: the default
    threshold for every agent)."""
    if not settings.calibration_enabled or source is None:
        return None
    return CalibrationRefresher(
        source, book, settings.calibration_rule(), settings.calibration_refresh_s, clock
    )
