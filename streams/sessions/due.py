"""When each session's next mark is due (idle, an end's grace over, past retention): the latest
per session, and a heap in time order, so that a timer tick reads only what is due, never every
session a worker holds (a day's final sessions wait for their purge in it)."""

from __future__ import annotations

import heapq

RESEND_S = 30.0  # a mark sent and not acted on (still due) is sent again after this long


class DueMarks:
    def __init__(self) -> None:
        self.latest: dict[str, tuple[float, str]] = {}  # session id -> (when, mark)
        self._heap: list[tuple[float, str]] = []  # (when, session id); stale ones skipped

    def __len__(self) -> int:
        return len(self.latest)

    def set(self, sid: str, at: float, mark: str) -> None:
        self.latest[sid] = (at, mark)
        heapq.heappush(self._heap, (at, sid))
        if len(self._heap) > 2 * len(self.latest) + 1024:  # mostly stale: rebuilt, linear
            self._heap = [(when, s) for s, (when, _) in self.latest.items()]
            heapq.heapify(self._heap)

    def pop(self, sid: str) -> None:
        self.latest.pop(sid, None)

    def clear(self) -> None:
        self.latest.clear()
        self._heap.clear()

    def due(self, now: float) -> list[tuple[str, str]]:
        """(session id, mark) of each session due now; each is due again RESEND_S later, in
        case its mark is lost (the mark is re-checked where the session's state is)."""
        found = []
        while self._heap and self._heap[0][0] <= now:
            at, sid = heapq.heappop(self._heap)
            latest = self.latest.get(sid)
            if latest is None or latest[0] != at:
                continue  # replaced since, or forgotten
            found.append((sid, latest[1]))
        for sid, mark in found:
            self.set(sid, now + RESEND_S, mark)
        return found
