"""Finding idle windows and expired closed ones, from a timer.

Tables can only change inside stream iteration, so the timer never touches them: it sends a
marker keyed (and partitioned) like the window into the events topic, and the window agent
applies it in-stream (`EventHandler.on_marker`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tracejudge.models.names import MARKER_HEADER
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import Channel
from tracejudge.streams.worker.baselines import BASELINE_MARKER_ID, SEP
from tracejudge.streams.worker.liveness import PartitionLiveness
from tracejudge.streams.worker.windows import Marker, WindowStore

log = logging.getLogger(__name__)

# Since when a partition has been consumed live (None: not live now); see liveness.py.
LiveSince = Callable[[int], float | None]


def _always_live(partition: int) -> float:
    return 0.0


# -- what is due: the timer's view of the store, re-checked in-stream ----------------------


def due(
    store: WindowStore,
    now: float,
    idle_timeout_s: float,
    retention_s: float,
    live_since: LiveSince = _always_live,
    refresh_after_s: float | None = None,
) -> Iterator[tuple[str, int, Marker]]:
    """Requests whose window is idle, whose closed marker has outlived its retention, or
    whose records are due to be written again (each re-checked in-stream)."""
    for rid, marker in store.closed.items():
        # in closing order: the first one not due ends the look (markers read in after a
        # restart may wait behind it, at most one retention), so a scan does not walk
        # every request closed in the last hour
        if now - marker.closed_at < retention_s:
            break
        yield rid, marker.partition, "purge"
    for rid, window in list(store.open.items()):
        meta = window.meta
        if _idle(meta.partition, meta.last_event_at, now, idle_timeout_s, live_since):
            yield rid, meta.partition, "idle_close"
        elif window.held is not None and now - window.held.since >= store.hold_s:
            yield rid, meta.partition, "flush"
        elif refresh_after_s is not None and now - window.opened_at >= refresh_after_s:
            yield rid, meta.partition, "refresh"


def marker_applies(
    store: WindowStore,
    request_id: str,
    marker: Marker,
    now: float,
    timeouts: tuple[float, float, float | None],
    live_since: LiveSince = _always_live,
) -> bool:
    """Re-check in-stream: an event may have arrived since the marker was sent.
    `timeouts`: idle timeout, closed retention, refresh age (None: never)."""
    idle_timeout_s, retention_s, refresh_after_s = timeouts
    if marker == "purge":
        closed = store.closed.get(request_id)
        return closed is not None and now - closed.closed_at >= retention_s
    window = store.open.get(request_id)
    if window is None:
        return False
    if marker == "refresh":
        return refresh_after_s is not None and now - window.opened_at >= refresh_after_s
    if marker == "flush":
        return window.held is not None
    meta = window.meta
    return _idle(meta.partition, meta.last_event_at, now, idle_timeout_s, live_since)


def _idle(
    partition: int, last_event_at: float, now: float, idle_timeout_s: float, live_since: LiveSince
) -> bool:
    """Quiet for the whole timeout while its partition was consumed live."""
    since = live_since(partition)
    if since is None:
        return False
    return now - max(last_event_at, since) >= idle_timeout_s


# Re-send a marker only if the previous one has had this long to come back through the stream.
MARKER_RESEND_S = 30.0


@dataclass(frozen=True)
class Timeouts:
    idle_s: float  # an open window with no event for this long is closed
    retention_s: float  # a closed window is remembered this long to count late events
    # an open window's records are written again after this long, before the changelog's
    # retention could take them (None: never)
    refresh_s: float | None = None

    def seconds(self) -> tuple[float, float, float | None]:
        return self.idle_s, self.retention_s, self.refresh_s


@dataclass
class MarkerLog:
    """When a marker was last sent per request, so that a slow stream is not flooded."""

    sent_at: dict[str, float] = field(default_factory=dict)

    def due(self, request_id: str, now: float) -> bool:
        return now - self.sent_at.get(request_id, 0.0) >= MARKER_RESEND_S

    def sent(self, request_id: str, now: float) -> None:
        self.sent_at[request_id] = now

    def arrived(self, request_id: str) -> None:
        self.sent_at.pop(request_id, None)


@dataclass
class IdleScanner:
    store: WindowStore
    events: Channel
    timeouts: Timeouts
    markers: MarkerLog
    liveness: PartitionLiveness
    metrics: Metrics
    clock: Callable[[], float]
    indexed_for: int | None = None  # the assignment the activity index was rebuilt for

    def _reindex_if_restored(self) -> None:
        """Partitions become live only after a rebalance and the changelog recovery that
        follows it are over: rebuild the activity index then, once per assignment, so that
        windows restored from the changelog are found too."""
        if self.liveness.live_since and self.indexed_for != self.liveness.assignments:
            windows = self.store.reindex(self.clock())
            log.info("windows read in from the tables: %d", windows)
            self.metrics.counts["activity_reindexes"] += 1
            self.indexed_for = self.liveness.assignments

    def _baselines_due(self, now: float) -> list[tuple[str, int, Marker]]:
        """A marker to each partition whose baselines have learning not yet written."""
        book = self.store.baselines
        if book is None:
            return []
        return [
            (f"{BASELINE_MARKER_ID}{SEP}{p}", p, "baselines")
            for p in sorted(book.due(now))
            if self.liveness.since(p) is not None
        ]

    async def scan(self) -> None:
        now = self.clock()
        try:
            self._reindex_if_restored()
            idle_s, retention_s, refresh_s = self.timeouts.seconds()
            found = list(due(self.store, now, idle_s, retention_s, self.liveness.since, refresh_s))
            found += self._baselines_due(now)
            for request_id, partition, marker in found:
                if not self.markers.due(request_id, now):
                    continue
                self.markers.sent(request_id, now)
                await self.events.send(
                    key=request_id.encode("utf-8"),
                    value=json.dumps({"request_id": request_id}).encode(),
                    partition=partition,
                    headers=[(MARKER_HEADER, marker.encode())],
                )
        except Exception:
            # the next tick retries: markers are idempotent and re-checked in-stream
            self.metrics.counts["timer_errors"] += 1
            log.exception("idle-window scan failed")
