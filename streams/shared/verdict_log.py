"""The worker's log of verdicts: a line of counts per interval at INFO, each verdict at DEBUG.

A line per verdict at INFO cost about a tenth of the window agent's CPU at 1,400 events/s
(a record made, masked and formatted per verdict) and wrote hundreds of lines a second that
nobody reads; the per-request record is the evaluations topic (`tracejudge tail evaluations`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from tracejudge.judges.verdict.encoded import Summary

log = logging.getLogger("tracejudge.streams.shared.outputs")  # where the line always was


@dataclass
class VerdictLog:
    interval_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    tally: Counter[str] = field(default_factory=Counter)
    judges: Counter[str] = field(default_factory=Counter)
    last: float | None = None  # when the previous line was written; None: none yet

    def note(self, summary: Summary) -> None:
        """Count a published verdict; the first one, and the first after an interval, writes
        the line at once."""
        log.debug(
            "evaluated %s score=%d success=%s incomplete=%s closed_by=%s judge=%s",
            summary.request_id,
            summary.overall_score,
            summary.success,
            summary.incomplete,
            summary.closed_by,
            summary.judge_status,
        )
        self.tally["evaluated"] += 1
        self.tally["succeeded"] += summary.success
        self.tally["incomplete"] += summary.incomplete
        self.tally["alerts"] += len(summary.alert_kinds)
        self.judges[summary.judge_status] += 1
        if self.last is None or self.clock() - self.last >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        """Write what was counted since the previous line, if anything (a timer calls this, so
        the last verdicts before a quiet spell are not left out)."""
        if not self.tally["evaluated"]:
            return
        now = self.clock()
        t = self.tally
        log.info(
            "evaluated %d requests %s: %d succeeded, %d incomplete, %d alerts; judge %s",
            t["evaluated"],
            "since start" if self.last is None else f"in the last {now - self.last:.0f} s",
            t["succeeded"],
            t["incomplete"],
            t["alerts"],
            " ".join(f"{status}={n}" for status, n in sorted(self.judges.items())),
        )
        self.tally.clear()
        self.judges.clear()
        self.last = now
