"""Per-request session windows over three Faust tables.

A window is never stored as one value: that value would grow with the trace and be re-sent
to the changelog on every event, making changelog traffic quadratic in trace length. Instead
each event is written once under its own key, and the per-request value is a small record of
fixed size:

- `steps`: `{request_id}␟{seq}` -> the validated event (or a stub when beyond the step limit)
- `seen`:  `{request_id}␟{event_id}` -> seq, to drop duplicates in O(1)
- `meta`:  `request_id` -> counters and timestamps (constant size)

Changelog bytes per event are therefore the event itself plus a constant.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal

from tracejudge.judges.early_stop import Action
from tracejudge.models.events import STEP_TYPES, Event, FinalResponse, ToolCall
from tracejudge.models.window import ClosedBy, Window, assemble_window

SEP = "\x1f"
AddStatus = Literal["added", "duplicate", "late"]
Marker = Literal["idle_close", "purge"]


def step_key(request_id: str, seq: int) -> str:
    return f"{request_id}{SEP}{seq:06d}"


def seen_key(request_id: str, event_id: str) -> str:
    return f"{request_id}{SEP}{event_id}"


def _stub(event: Event) -> dict[str, Any]:
    """What is kept of a step beyond the limit: identity, and the outcome of a tool call."""
    stub: dict[str, Any] = {
        "type": event.type,
        "request_id": event.request_id,
        "event_id": event.resolved_event_id(),
        "step_index": event.step,
        "dropped": True,
    }
    if isinstance(event, ToolCall):
        stub.update(tool=event.tool, success=event.success)
    return stub


@dataclass
class WindowStore:
    meta: MutableMapping[str, Any]
    steps: MutableMapping[str, Any]
    seen: MutableMapping[str, Any]
    max_steps: int

    def add(self, event: Event, partition: int, now: float) -> AddStatus:
        rid = event.request_id
        meta = self.meta.get(rid)
        if meta is not None and meta.get("closed"):
            self.meta[rid] = {**meta, "late": meta.get("late", 0) + 1}
            return "late"
        event_id = event.resolved_event_id()
        seq_seen = self.seen.get(seen_key(rid, event_id))
        # The three tables' changelogs are separate topics, so a crash can persist one write
        # and not another: an event counts as seen only when its record is really there.
        if (
            seq_seen is not None
            and meta is not None
            and seq_seen < meta["n"]
            and step_key(rid, seq_seen) in self.steps
        ):
            return "duplicate"
        if meta is None:
            meta = {"p": partition, "n": 0, "steps": 0, "dropped": 0, "first": now, "late": 0}
        meta = dict(meta)
        record: dict[str, Any] = event.model_dump(mode="json", exclude_none=True)
        record["event_id"] = event_id
        if event.type in STEP_TYPES:
            meta["steps"] += 1
            if meta["steps"] > self.max_steps:
                meta["dropped"] += 1
                record = _stub(event)
        seq = meta["n"]
        self.steps[step_key(rid, seq)] = record
        self.seen[seen_key(rid, event_id)] = seq
        meta["n"] = seq + 1
        meta["last"] = now
        self.meta[rid] = meta
        return "added"

    def is_open(self, request_id: str) -> bool:
        meta = self.meta.get(request_id)
        return meta is not None and not meta.get("closed")

    def collect(self, request_id: str, closed_by: ClosedBy) -> Window:
        meta = self.meta[request_id]
        records = [self.steps.get(step_key(request_id, i)) for i in range(meta["n"])]
        return assemble_window(
            request_id,
            [r for r in records if r is not None],
            closed_by=closed_by,
            step_count=meta["steps"],
            steps_dropped=meta["dropped"],
            early_stops=[tuple(e) for e in meta.get("early", [])],
        )

    def close(self, request_id: str, closed_by: ClosedBy, now: float) -> None:
        """Forget the steps and keep a small closed marker, so late events are only counted."""
        meta = dict(self.meta[request_id])
        # The closed marker goes first: after a crash mid-close, a replayed terminal event
        # then counts as late instead of re-judging a half-deleted window.
        self.meta[request_id] = {**meta, "closed": closed_by, "closed_at": now, "n": 0}
        for i in range(meta["n"]):
            key = step_key(request_id, i)
            record = self.steps.get(key)
            if record is not None:
                self.seen.pop(seen_key(request_id, record["event_id"]), None)
                del self.steps[key]

    def early_actions(self, request_id: str) -> frozenset[Action]:
        return frozenset(action for action, _ in self.meta[request_id].get("early", []))

    def record_early(self, request_id: str, action: str, iteration: int) -> None:
        meta = self.meta[request_id]
        self.meta[request_id] = {**meta, "early": [*meta.get("early", []), [action, iteration]]}

    def purge(self, request_id: str) -> None:
        self.meta.pop(request_id, None)

    def due(
        self, now: float, idle_timeout_s: float, retention_s: float
    ) -> Iterator[tuple[str, int, Marker]]:
        """Requests whose window is idle, or whose closed marker has outlived its retention."""
        for rid, meta in list(self.meta.items()):
            if meta.get("closed"):
                if now - meta.get("closed_at", now) >= retention_s:
                    yield rid, meta["p"], "purge"
            elif now - meta.get("last", now) >= idle_timeout_s:
                yield rid, meta["p"], "idle_close"

    def marker_applies(
        self, request_id: str, marker: Marker, now: float, idle_timeout_s: float, retention_s: float
    ) -> bool:
        """Re-check in-stream: an event may have arrived since the marker was sent."""
        meta = self.meta.get(request_id)
        if meta is None:
            return False
        if marker == "purge":
            return bool(meta.get("closed")) and now - meta.get("closed_at", now) >= retention_s
        return not meta.get("closed") and now - meta.get("last", now) >= idle_timeout_s


def is_terminal(event: Event) -> bool:
    return isinstance(event, FinalResponse)
