"""Raises one judge_unavailable alert when fallbacks exceed a rate over a window."""

from __future__ import annotations

from collections import deque


class FallbackMonitor:
    def __init__(self, window_s: float, max_rate: float, min_requests: int) -> None:
        self.window_s = window_s
        self.max_rate = max_rate
        self.min_requests = min_requests
        self._outcomes: deque[tuple[float, bool]] = deque()
        self._alerted_at: float | None = None

    def record(self, ok: bool, now: float) -> bool:
        """Record one judged request; True when an alert is due (at most one per window)."""
        self._outcomes.append((now, ok))
        while self._outcomes and self._outcomes[0][0] < now - self.window_s:
            self._outcomes.popleft()
        total = len(self._outcomes)
        failed = sum(1 for _, good in self._outcomes if not good)
        if total < self.min_requests or failed / total <= self.max_rate:
            return False
        if self._alerted_at is not None and now - self._alerted_at < self.window_s:
            return False
        self._alerted_at = now
        return True

    def rate(self) -> float:
        total = len(self._outcomes)
        return sum(1 for _, good in self._outcomes if not good) / total if total else 0.0
