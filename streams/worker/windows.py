"""Per-request session windows over three Faust tables.

A window is never stored as one value: that value would grow with the trace and be re-sent
to the changelog on every event, making changelog traffic quadratic in trace length. Instead
each event is written once under its own key, and the per-request value is a small record of
fixed size (formats in `records.py`):

- `steps`: `{request_id}␟{seq}` -> the validated event (or a stub when beyond the step limit)
- `seen`:  `{request_id}␟{event_id}` -> seq, to drop duplicates in O(1)
- `meta`:  `request_id` -> a `WindowMeta`: counters, timestamps and state

Changelog bytes per event are therefore the event itself plus a constant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tracejudge.judges.early_stop import Action
from tracejudge.models.events import STEP_TYPES, Event, FinalResponse
from tracejudge.models.window import ClosedBy, Window, assemble_window
from tracejudge.streams.worker.records import WindowMeta, read_step, step_record

SEP = "\x1f"
AddStatus = Literal["added", "duplicate", "late"]
Marker = Literal["idle_close", "purge"]
# Since when a partition has been consumed live (None: not live now); see liveness.py.
LiveSince = Callable[[int], float | None]


def _always_live(partition: int) -> float:
    return 0.0


def step_key(request_id: str, seq: int) -> str:
    return f"{request_id}{SEP}{seq:06d}"


def seen_key(request_id: str, event_id: str) -> str:
    return f"{request_id}{SEP}{event_id}"


@dataclass(frozen=True)
class Activity:
    """What the idle scan needs of a window, kept in memory so that a scan never reads (and
    decodes) every meta record of a table that may live on disk."""

    partition: int
    last_event_at: float
    closed: bool
    closed_at: float | None

    @classmethod
    def of(cls, meta: WindowMeta) -> Activity:
        return cls(meta.partition, meta.last_event_at, meta.closed, meta.closed_at)


@dataclass
class WindowStore:
    meta: MutableMapping[str, Any]
    steps: MutableMapping[str, Any]
    seen: MutableMapping[str, Any]
    max_steps: int
    # TRACEJUDGE_TRACE_CAPTURE=false: every step kept as a stub (identity, a tool call's name
    # and outcome), never its text; not counted as dropped, since nothing was over a limit
    capture: bool = True
    # Every meta write goes through `_save` and `purge`, which keep this in step; what the
    # changelog restores at an assignment is read in by `reindex`.
    activity: dict[str, Activity] = field(default_factory=dict)

    def _meta(self, request_id: str) -> WindowMeta | None:
        record = self.meta.get(request_id)
        return None if record is None else WindowMeta.of_record(record)

    def _save(self, request_id: str, meta: WindowMeta) -> None:
        self.meta[request_id] = meta.to_record()
        self.activity[request_id] = Activity.of(meta)

    def reindex(self) -> int:
        """Rebuild the activity index from the meta table (after partitions were restored);
        how many windows it holds."""
        self.activity = {
            rid: Activity.of(WindowMeta.of_record(record)) for rid, record in self.meta.items()
        }
        return len(self.activity)

    def add(self, event: Event, partition: int, now: float) -> AddStatus:
        rid = event.request_id
        meta = self._meta(rid)
        if meta is not None and meta.closed:
            meta.late_events += 1
            self._save(rid, meta)
            return "late"
        event_id = event.resolved_event_id()
        seq_seen = self.seen.get(seen_key(rid, event_id))
        # The three tables' changelogs are separate topics, so a crash can persist one write
        # and not another: an event counts as seen only when its record is really there.
        if (
            seq_seen is not None
            and meta is not None
            and seq_seen < meta.next_seq
            and step_key(rid, seq_seen) in self.steps
        ):
            # With a persistent store, a worker killed before its changelog writes were sent
            # still holds them on disk, so the redelivered event finds them here and the
            # changelog (what another worker would rebuild from) never would. Writing them again
            # makes it converge; duplicates are rare, so this costs little.
            key = step_key(rid, seq_seen)
            self.steps[key] = self.steps[key]
            self.seen[seen_key(rid, event_id)] = seq_seen
            self._save(rid, meta)
            return "duplicate"
        if meta is None:
            meta = WindowMeta(partition=partition)
        beyond_limit = False
        if event.type in STEP_TYPES:
            meta.step_count += 1
            if not self.capture:
                beyond_limit = True
            elif meta.step_count > self.max_steps:
                meta.steps_dropped += 1
                beyond_limit = True
        seq = meta.next_seq
        self.steps[step_key(rid, seq)] = step_record(event, beyond_limit=beyond_limit)
        self.seen[seen_key(rid, event_id)] = seq
        meta.next_seq = seq + 1
        meta.last_event_at = now
        self._save(rid, meta)
        return "added"

    def is_open(self, request_id: str) -> bool:
        meta = self._meta(request_id)
        return meta is not None and not meta.closed

    def collect(self, request_id: str, closed_by: ClosedBy) -> Window:
        meta = self._meta(request_id)
        assert meta is not None, "collect() of a window that does not exist"
        events = []
        for seq in range(meta.next_seq):
            record = self.steps.get(step_key(request_id, seq))
            event = None if record is None else read_step(record)
            if event is not None:
                events.append(event)
        return assemble_window(
            request_id,
            events,
            closed_by=closed_by,
            step_count=meta.step_count,
            steps_dropped=meta.steps_dropped,
            early_stops=[(str(a), int(i)) for a, i in meta.early_stops],
        )

    def close(self, request_id: str, closed_by: ClosedBy, now: float) -> None:
        """Forget the steps and keep a small closed marker, so late events are only counted."""
        meta = self._meta(request_id)
        assert meta is not None, "close() of a window that does not exist"
        written = meta.next_seq
        # The closed marker goes first: after a crash mid-close, a replayed terminal event
        # then counts as late instead of re-judging a half-deleted window.
        meta.closed_by, meta.closed_at, meta.next_seq = closed_by, now, 0
        self._save(request_id, meta)
        for seq in range(written):
            key = step_key(request_id, seq)
            record = self.steps.get(key)
            if record is not None:
                self.seen.pop(seen_key(request_id, record["event_id"]), None)
                del self.steps[key]

    def early_actions(self, request_id: str) -> frozenset[Action]:
        meta = self._meta(request_id)
        return frozenset(action for action, _ in meta.early_stops) if meta else frozenset()

    def record_early(self, request_id: str, action: str, iteration: int) -> None:
        meta = self._meta(request_id)
        assert meta is not None, "record_early() of a window that does not exist"
        meta.early_stops = [*meta.early_stops, [action, iteration]]
        self._save(request_id, meta)

    def purge(self, request_id: str) -> None:
        self.meta.pop(request_id, None)
        self.activity.pop(request_id, None)

    def due(
        self,
        now: float,
        idle_timeout_s: float,
        retention_s: float,
        live_since: LiveSince = _always_live,
    ) -> Iterator[tuple[str, int, Marker]]:
        """Requests whose window is idle, or whose closed marker has outlived its retention
        (from the activity index: the marker sent for each is re-checked in-stream)."""
        for rid, act in list(self.activity.items()):
            if act.closed:
                if now - (act.closed_at or now) >= retention_s:
                    yield rid, act.partition, "purge"
            elif _idle(act.partition, act.last_event_at, now, idle_timeout_s, live_since):
                yield rid, act.partition, "idle_close"

    def marker_applies(
        self,
        request_id: str,
        marker: Marker,
        now: float,
        idle_timeout_s: float,
        retention_s: float,
        live_since: LiveSince = _always_live,
    ) -> bool:
        """Re-check in-stream: an event may have arrived since the marker was sent."""
        meta = self._meta(request_id)
        if meta is None:
            return False
        if marker == "purge":
            return meta.closed and now - (meta.closed_at or now) >= retention_s
        return not meta.closed and _idle(
            meta.partition, meta.last_event_at, now, idle_timeout_s, live_since
        )


def _idle(
    partition: int, last_event_at: float, now: float, idle_timeout_s: float, live_since: LiveSince
) -> bool:
    """Quiet for the whole timeout while its partition was consumed live."""
    since = live_since(partition)
    if since is None:
        return False
    return now - max(last_event_at, since) >= idle_timeout_s


def is_terminal(event: Event) -> bool:
    return isinstance(event, FinalResponse)
