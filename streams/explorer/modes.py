"""The explorer's failure modes: the verdicts held grouped by agent and mode (count, trend over
the last hour, first and last seen, agent versions, example runs, the share of runs judged
failed), and the announcements read from the modes topic (docs/modes.md)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tracejudge.streams.explorer.store import Verdict, VerdictStore

TREND_BUCKETS = 6  # ten-minute buckets over the last hour
BUCKET_S = 600.0


@dataclass
class ModeRow:
    agent: str
    key: str
    name: str
    runs: list[Verdict] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def first_seen(self) -> float:
        return min(v.ts for v in self.runs)

    @property
    def last_seen(self) -> float:
        return max(v.ts for v in self.runs)

    @property
    def versions(self) -> list[tuple[str, int]]:
        return Counter(v.version or "-" for v in self.runs).most_common(4)

    def trend(self, now: float) -> list[int]:
        """Runs per ten minutes over the last hour, oldest first."""
        counts = [0] * TREND_BUCKETS
        for v in self.runs:
            back = int((now - v.ts) // BUCKET_S)
            if 0 <= back < TREND_BUCKETS:
                counts[TREND_BUCKETS - 1 - back] += 1
        return counts

    @property
    def failed_share(self) -> float:
        """Its runs judged with failed steps or left incomplete: the rest only fell below the
        threshold or a rule found something on a pass (what outcomes may call false alarms)."""
        return sum(not v.success or v.incomplete for v in self.runs) / len(self.runs)


def mode_rows(store: VerdictStore, agent: str = "", key: str = "") -> list[ModeRow]:
    """The modes of the verdicts held, the most runs first; announcements matched to them."""
    rows: dict[tuple[str, str], ModeRow] = {}
    for v in store.newest():
        if v.mode is None or (agent and v.agent != agent) or (key and v.mode[0] != key):
            continue
        row = rows.get((v.agent, v.mode[0]))
        if row is None:
            row = rows[(v.agent, v.mode[0])] = ModeRow(v.agent, v.mode[0], v.mode[1])
        row.runs.append(v)
    by_key: dict[str, list[ModeRow]] = {}  # a mode's key names its agent: one row, or none
    for row in rows.values():
        by_key.setdefault(row.key, []).append(row)
    for alert in store.mode_alerts:
        for row in by_key.get(str((alert.get("mode") or {}).get("key")), ()):
            row.alerts.append(alert)
    return sorted(rows.values(), key=lambda r: (-len(r.runs), r.name))


def take_alert(store: VerdictStore, value: bytes) -> None:
    """One record of the modes topic (raises on one it cannot read: the reader counts it)."""
    record = json.loads(value)
    if not isinstance(record, dict) or not isinstance(record.get("mode"), dict):
        raise ValueError("not a mode alert")
    if not isinstance(record.get("ts"), int | float) or not isinstance(record.get("kind"), str):
        raise ValueError("a mode alert needs a kind and a ts")
    if any(a.get("alert_id") == record.get("alert_id") for a in store.mode_alerts):
        return  # read again
    store.mode_alerts.append(record)
