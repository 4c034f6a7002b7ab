"""Per-request session windows: step records in one Faust table, open windows' state in memory.

Changelog traffic is what bounds the worker's throughput (each table write is a record sent to
Kafka), so a window costs one changelog record per event and one at its close:

- `steps`: `{request_id}␟{seq}` -> the validated event (or a stub when beyond the step limit).
  The record is also the duplicate check: the event ids of an open window are kept in memory,
  rebuilt from its records when the window is first touched after an assignment.
- `meta`: `request_id` -> a `WindowMeta`, written only when something must outlive the worker
  that the steps cannot tell: the closed marker (and its late-event count), early stops taken.
  Counters of an open window live in memory and are recounted from its records.

Nothing is deleted through the changelog (a tombstone per step would double the records): a
closed window's steps and an expired marker are deleted from the local store only (`data`,
Faust's `Table.data`), and the changelogs drop old records by retention (`kafka/admin.py`),
the steps' sooner than the markers', so a recovery never finds steps whose marker is gone. What
a recovery restores of a closed window is honoured: its marker says it is closed; its steps are
deleted with the marker. An open window older than half the steps' retention is written again
(`refresh`) so that retention never takes the records of a window still open.

The steps of a closed window are kept until the verdict's outputs are acknowledged
(`forget_steps`): the record that closed it, delivered again after a crash, then finds them and
re-publishes the verdict (same ids) instead of counting as late.

Held steps (`hold_s` > 0, the worker's setting): a new step record is first kept in memory
only, and its input record is not acknowledged, so Faust does not commit past it; the input
topic itself is then what a crash recovers it from (Kafka Streams does the same with source
topics). Most requests end within the hold, so their steps never reach the changelog at all:
the verdict is made from memory and the records are acknowledged with it. A window held longer
(`hold_s`, or `HOLD_MAX` steps, or `HOLD_TOTAL` held in all) has its steps written and
acknowledged. After a crash, a closed window's records delivered again, up to the one that
closed it, are collected (`replays`) and judged again, unless the verdict is known to have
been acknowledged (its written steps already forgotten).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tracejudge.judges.inflight.early_stop import Action, Round
from tracejudge.judges.rules.agent_norms import RunStats, Tally
from tracejudge.judges.windows.records import (
    OPENED_AT,
    PARTITION,
    HeldStep,
    WindowMeta,
    encoded,
    load_record,
    round_of_record,
    step_record,
    window_of,
    with_fields,
)
from tracejudge.judges.windows.run_state import RunState
from tracejudge.models.events import STEP_TYPES, Event, FinalResponse, Iteration
from tracejudge.models.window import ClosedBy, Fired, Window
from tracejudge.streams.shared.commit import Held
from tracejudge.streams.worker.baselines import BaselineBook

SEP = "\x1f"
AddStatus = Literal["added", "duplicate", "late", "reclose", "replayed", "over_cap"]
Marker = Literal["idle_close", "purge", "refresh", "flush", "baselines"]
HOLD_MAX = 200  # steps of one window held at most
HOLD_TOTAL = 100_000  # steps held at most in all, before each window adding one is written
TAIL_STEPS = 10  # steps beyond the step limit kept in detail: the last ones, in memory


def step_key(request_id: str, seq: int) -> str:
    return f"{request_id}{SEP}{seq:06d}"


def _delete(local: MutableMapping[str, Any], key: str) -> None:
    # not `pop`: it reads (and decodes) the value first; a store delete of a missing key is
    # a no-op, a dict's raises
    with contextlib.suppress(KeyError):
        del local[key]


def _local(table: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The local store under a changelogged table (Faust's `Table.data`): deleting there sends
    nothing to the changelog. A plain mapping is its own local store."""
    data = getattr(table, "data", None)
    return data if isinstance(data, MutableMapping) else table


@dataclass
class OpenWindow:
    """What is kept in memory of an open window: everything but the written steps' content."""

    meta: WindowMeta
    ids: dict[str, int]  # event id -> seq of its record
    opened_at: float  # when its first record was written (or last refreshed)
    held: Held | None = None  # steps not written yet
    # its iterations as the early-stop check reads them, kept as they arrive: a check on each
    # iteration event does not decode the whole window again
    rounds: list[Round] = field(default_factory=list)
    # the run's counts over every step, those beyond the step limit too (judged, and learned
    # into its agent's baseline, at close)
    tally: Tally = field(default_factory=Tally)
    # the last steps beyond the step limit in detail, (seq, record): how a long run ended is
    # what decides it, and its stubs say only "failed". In memory only, bounded (`tail_steps`
    # records); a window rebuilt after a restart has the stubs (and failed steps' digests).
    tail: deque[tuple[int, Event]] = field(default_factory=lambda: deque(maxlen=TAIL_STEPS))
    # the run's state in flight (loop rules, budget, per-step checks: the interventions'),
    # made from the records when first needed and dropped with the window
    run: RunState | None = None


@dataclass(frozen=True)
class ClosedMarker:
    """What the purge scan needs of a closed window, so a scan never reads the meta table."""

    partition: int
    closed_at: float


@dataclass
class WindowStore:
    meta: MutableMapping[str, Any]
    steps: MutableMapping[str, Any]
    max_steps: int
    # events read per request; past it counted (`WindowMeta.over_cap`), not kept
    max_events: int = 20_000
    # TRACEJUDGE_TRACE_CAPTURE=false: every step kept as a stub (identity, a tool call's name
    # and outcome), never its text; not counted as dropped, since nothing was over a limit
    capture: bool = True
    hold_s: float = 0.0  # 0: every step written at once (no one acknowledges records late)
    tail_steps: int = TAIL_STEPS  # beyond the step limit, the last ones kept in detail
    open: dict[str, OpenWindow] = field(default_factory=dict)
    closed: dict[str, ClosedMarker] = field(default_factory=dict)
    replays: dict[str, Held] = field(default_factory=dict)  # closed windows read again
    held_total: int = 0
    # per-partition state kept beside the windows: forgotten with them when partitions move
    baselines: BaselineBook | None = None

    def __post_init__(self) -> None:
        self._meta_local = _local(self.meta)
        self._steps_local = _local(self.steps)

    # -- loading what a recovery restored -------------------------------------------------

    def _records(self, request_id: str) -> list[Any]:
        """A window's step records, read until the first missing sequence number (the
        changelog of a partition keeps the order they were written in)."""
        records: list[Any] = []
        while (record := self.steps.get(step_key(request_id, len(records)))) is not None:
            records.append(record)
        return records

    def _window(
        self, request_id: str, partition: int, now: float, *, create: bool = True
    ) -> OpenWindow | WindowMeta | None:
        """The open window in memory; else a closed marker; else the window rebuilt from its
        records, or a new one (None with `create=False`)."""
        window = self.open.get(request_id)
        if window is not None:
            return window
        record = self.meta.get(request_id)
        stored = None if record is None else WindowMeta.of_record(record)
        if stored is not None and stored.closed:
            self.closed[request_id] = ClosedMarker(stored.partition, stored.closed_at or now)
            return stored
        window = self._rebuilt(request_id, partition, now, stored)
        if window.meta.next_seq == 0 and stored is None and not create:
            return None
        self.open[request_id] = window
        return window

    def _rebuilt(
        self, request_id: str, partition: int, now: float, stored: WindowMeta | None
    ) -> OpenWindow:
        records = [load_record(r) for r in self._records(request_id)]
        if stored is not None:
            partition = stored.partition
        # last event unknown: idle time counts from when its partition became live
        meta = WindowMeta(partition=partition, next_seq=len(records))
        meta.step_count = sum(1 for r in records if r.get("type") in STEP_TYPES)
        if self.capture:
            meta.steps_dropped = max(0, meta.step_count - self.max_steps)
        if stored is not None:
            meta.early_stops = stored.early_stops
            meta.interventions = stored.interventions
        opened = float(records[0].get(OPENED_AT, now)) if records else now
        window = OpenWindow(
            meta,
            {str(r["event_id"]): i for i, r in enumerate(records)},
            opened,
            tail=deque(maxlen=self.tail_steps),
        )
        for record in records:
            window.tally.add_record(record)
            if record.get("type") == "iteration":
                window.rounds.append(round_of_record(record))
        return window

    def reindex(self, now: float) -> int:
        """Read in every window the tables hold that is not in memory yet (after partitions
        were restored), so the idle scan finds those no event touches any more; how many
        windows are known."""
        if self.baselines is not None:
            self.baselines.restored()
        for rid, record in list(self.meta.items()):
            stored = WindowMeta.of_record(record)
            if stored.closed and rid not in self.closed:
                self.closed[rid] = ClosedMarker(stored.partition, stored.closed_at or now)
        for key in list(self.steps.keys()):
            rid, _, seq = key.rpartition(SEP)
            if seq == "000000" and rid not in self.closed and rid not in self.open:
                value = self.steps.get(key)
                if value is not None:
                    self._window(rid, int(load_record(value).get(PARTITION, 0)), now)
        return len(self.open) + len(self.closed)

    def unload(self) -> None:
        """Partitions were revoked: what is in memory may be changed by another worker, and
        what was held is read again by whoever owns it next."""
        for held in [w.held for w in self.open.values() if w.held] + list(self.replays.values()):
            held.drop()
        self.open.clear()
        self.closed.clear()
        self.replays.clear()
        self.held_total = 0
        if self.baselines is not None:
            self.baselines.forget()

    # -- events ----------------------------------------------------------------------------

    def add(self, event: Event, partition: int, now: float, offset: int = -1) -> AddStatus:
        rid = event.request_id
        window = self._window(rid, partition, now)
        assert window is not None
        if isinstance(window, WindowMeta):
            if self.closed_here(rid, window, offset):
                self._replayed(event, window, now)  # the closing event is part of the window
                return "reclose"
            if self._before_close(rid, window, offset):
                return self._replayed(event, window, now)
            window.late_events += 1
            self.meta[rid] = window.to_record()
            return "late"
        meta, event_id = window.meta, event.resolved_event_id()
        seq = window.ids.get(event_id)
        if seq is not None:
            # With a persistent store, a worker killed before its changelog writes were sent
            # still holds them on disk, so the redelivered event finds them here and the
            # changelog (what another worker would rebuild from) never would. Writing the
            # record again makes it converge; duplicates are rare, so this costs little.
            if window.held is None or seq not in window.held.records:
                key = step_key(rid, seq)
                self.steps[key] = self.steps[key]
            return "duplicate"
        if meta.next_seq >= self.max_events and not isinstance(event, FinalResponse):
            meta.over_cap += 1  # the run's cost to the worker ends here; its close does not
            return "over_cap"
        window.tally.add(event)
        beyond_limit = False
        if event.type in STEP_TYPES:
            meta.step_count += 1
            if not self.capture:
                beyond_limit = True
            elif meta.step_count > self.max_steps:
                meta.steps_dropped += 1
                beyond_limit = True
        seq = meta.next_seq
        extra = {OPENED_AT: window.opened_at, PARTITION: partition} if seq == 0 else None
        round_ = _round(event) if isinstance(event, Iteration) else None
        record: bytes | HeldStep
        if self.hold_s > 0 and not beyond_limit:
            record = HeldStep(event, extra)  # encoded only if it is ever written
        else:
            record = step_record(
                event, beyond_limit=beyond_limit, extra=extra, round_=round_, digest=self.capture
            )
        if beyond_limit and self.capture and self.tail_steps > 0:
            window.tail.append((seq, event))  # encoded only if it is still there at close
        if round_ is not None:
            # every round, those beyond the step limit or with capture off too: the early-stop
            # check reads the round's signals, which the stub keeps, not its text
            window.rounds.append(round_)
        window.ids[event_id] = seq
        meta.next_seq = seq + 1
        meta.last_event_at = now
        if self.hold_s <= 0:
            self.steps[step_key(rid, seq)] = encoded(record)
            return "added"
        if window.held is None:
            window.held = Held(now)
        window.held.records[seq] = record
        self.held_total += 1
        if (
            len(window.held.records) >= HOLD_MAX
            or now - window.held.since >= self.hold_s
            or self.held_total > HOLD_TOTAL
        ):
            self.flush(rid)
        return "added"

    def held(self, request_id: str) -> asyncio.Future[None] | None:
        """What the input records just added to an open window (or to a closed one read
        again) wait for before they are acknowledged."""
        window = self.open.get(request_id)
        held = window.held if window is not None else self.replays.get(request_id)
        return None if held is None else held.done

    def flush(self, request_id: str) -> int:
        """Write an open window's held steps; how many."""
        window = self.open.get(request_id)
        if window is None or window.held is None:
            return 0
        held, window.held = window.held, None
        for seq, record in sorted(held.records.items()):
            self.steps[step_key(request_id, seq)] = encoded(record)
        self.held_total -= len(held.records)
        held.release()
        return len(held.records)

    def _replayed(self, event: Event, meta: WindowMeta, now: float) -> AddStatus:
        """A closed window's record read again before the one that closed it: kept for the
        judgement again, unless its step is written."""
        if self.hold_s <= 0:
            return "duplicate"  # every step was written
        held = self.replays.setdefault(event.request_id, Held(now))
        event_id = event.resolved_event_id()
        held.records.setdefault(event_id, step_record(event, beyond_limit=False))
        return "replayed"

    def closed_here(self, request_id: str, meta: WindowMeta, offset: int) -> bool:
        """Whether the record at `offset` is the one that closed the window, and its verdict
        may not have been acknowledged before the worker stopped: none of its steps were
        written, or they are still kept."""
        return offset == meta.closed_offset and self._verdict_unsure(request_id, meta)

    def closed_by_record(self, request_id: str, partition: int, offset: int, now: float) -> bool:
        """`closed_here` for a record that is not an event (an idle-close marker)."""
        if request_id in self.open:
            return False
        window = self._window(request_id, partition, now, create=False)
        return isinstance(window, WindowMeta) and self.closed_here(request_id, window, offset)

    def _before_close(self, request_id: str, meta: WindowMeta, offset: int) -> bool:
        closing = meta.closed_offset
        return (
            closing is not None and 0 <= offset < closing and self._verdict_unsure(request_id, meta)
        )

    def _verdict_unsure(self, request_id: str, meta: WindowMeta) -> bool:
        """Closed by a known record, and none of its steps were written or they are still kept
        (they are forgotten once the verdict is acknowledged)."""
        return meta.closed_offset is not None and (
            meta.flushed == 0 or step_key(request_id, 0) in self._steps_local
        )

    def is_open(self, request_id: str) -> bool:
        return request_id in self.open

    def known(self, request_id: str) -> bool:
        """Whether this store has seen the request: its window open (in memory, or in its
        records not read in yet), or closed and its marker not purged yet (kept for
        TRACEJUDGE_CLOSED_RETENTION_S after the close). Reads only: nothing is created."""
        return (
            request_id in self.open
            or request_id in self.closed
            or self.meta.get(request_id) is not None
            or self.steps.get(step_key(request_id, 0)) is not None
        )

    def stored(self, request_id: str) -> tuple[WindowMeta, list[Any]]:
        """A window's counters and its step records as stored (None where one is missing)."""
        window = self.open.get(request_id)
        if window is not None:
            meta, held = window.meta, window.held.records if window.held else {}
            # the last steps beyond the limit, over their stubs
            detail = {seq: HeldStep(e) for seq, e in window.tail}
            return meta, [
                detail.get(seq) or held.get(seq) or self.steps.get(step_key(request_id, seq))
                for seq in range(meta.next_seq)
            ]
        # a closed window whose verdict is published again: its written steps, and what was
        # read again of the rest
        record = self.meta.get(request_id)
        assert record is not None, "stored() of a window that does not exist"
        written = self._records(request_id)
        ids = {load_record(r).get("event_id") for r in written}
        replayed = self.replays.get(request_id)
        again = [r for i, r in (replayed.records.items() if replayed else ()) if i not in ids]
        return WindowMeta.of_record(record), written + again

    def run_stats(self, request_id: str, records: list[Any]) -> RunStats:
        """The run's counts: kept as events came for an open window; for a closed one read
        again, counted from its records."""
        window = self.open.get(request_id)
        if window is not None:
            return window.tally.stats()
        tally = Tally()
        for record in records:
            if record is not None:
                tally.add_record(load_record(record))
        return tally.stats()

    def collect(self, request_id: str, closed_by: ClosedBy) -> Window:
        meta, records = self.stored(request_id)
        return window_of(
            request_id,
            records,
            closed_by=closed_by,
            step_count=meta.step_count,
            steps_dropped=meta.steps_dropped,
            early_stops=[(str(a), int(i)) for a, i in meta.early_stops],
            interventions=fired_of(meta),
            events_over_cap=meta.over_cap,
        )

    def close(
        self, request_id: str, closed_by: ClosedBy, now: float, offset: int | None
    ) -> tuple[int, Held | None]:
        """Write the closed marker (late events are only counted from now on); the written
        steps stay until `forget_steps`. How many step records it has written, and what its
        held input records wait for (to release once the verdict is acknowledged)."""
        window = self.open.pop(request_id, None)
        if window is None:  # closed again, by the record that closed it
            meta, held = (
                WindowMeta.of_record(self.meta[request_id]),
                self.replays.pop(request_id, None),
            )
        else:
            meta, held = window.meta, window.held
            meta.flushed = meta.next_seq - (len(held.records) if held else 0)
            self.held_total -= len(held.records) if held else 0
        meta.closed_by, meta.closed_at, meta.closed_offset = closed_by, now, offset
        self.meta[request_id] = meta.to_record()
        self.closed.pop(request_id, None)  # to the end: the purge scan reads in closing order
        self.closed[request_id] = ClosedMarker(meta.partition, now)
        return meta.flushed, held

    def forget_steps(self, request_id: str, count: int) -> None:
        """The verdict is acknowledged: delete the steps locally (the changelog's retention
        removes them there)."""
        for seq in range(count):
            _delete(self._steps_local, step_key(request_id, seq))

    def rounds(self, request_id: str) -> list[Round]:
        window = self.open.get(request_id)
        return [] if window is None else window.rounds

    def early_actions(self, request_id: str) -> frozenset[Action]:
        window = self.open.get(request_id)
        if window is None:
            return frozenset()
        return frozenset(action for action, _ in window.meta.early_stops)

    def record_early(self, request_id: str, action: str, iteration: int) -> None:
        meta = self.open[request_id].meta
        meta.early_stops = [*meta.early_stops, [action, iteration]]
        self._save_open_meta(meta, request_id)

    def fired(self, request_id: str) -> frozenset[str]:
        """The kinds of intervention sent to an open window's run (kept across a restart)."""
        window = self.open.get(request_id)
        if window is None:
            return frozenset()
        return frozenset(str(kind) for kind, *_ in window.meta.interventions)

    def sent(self, request_id: str) -> list[tuple[str, str, str]]:
        """(kind, crossed, action) of each intervention sent to an open window's run."""
        window = self.open.get(request_id)
        if window is None:
            return []
        return [(str(k), str(c), str(a)) for k, c, a, *_ in window.meta.interventions]

    def record_intervention(
        self, request_id: str, kind: str, crossed: str, action: str, step: int | None
    ) -> None:
        meta = self.open[request_id].meta
        meta.interventions = [*meta.interventions, [kind, crossed, action, step]]
        self._save_open_meta(meta, request_id)

    def _save_open_meta(self, meta: WindowMeta, request_id: str) -> None:
        # the only meta record of an open window: what its steps cannot tell (early-stop
        # decisions and interventions sent while it runs)
        record: dict[str, Any] = {"partition": meta.partition}
        if meta.early_stops:
            record["early_stops"] = meta.early_stops
        if meta.interventions:
            record["interventions"] = meta.interventions
        self.meta[request_id] = record

    def purge(self, request_id: str) -> None:
        """Forget a closed window whose retention is over: locally, marker and steps."""
        self.closed.pop(request_id, None)
        replayed = self.replays.pop(request_id, None)
        if replayed is not None:  # its closing record was never read again: nothing to judge
            replayed.release()
        _delete(self._meta_local, request_id)
        seq = 0
        while step_key(request_id, seq) in self._steps_local:
            _delete(self._steps_local, step_key(request_id, seq))
            seq += 1

    def refresh(self, request_id: str, now: float) -> int:
        """Write an open window's records again, so the changelog's retention keeps them; how
        many were written."""
        window = self.open[request_id]
        window.opened_at = now
        for seq in range(window.meta.next_seq):
            key = step_key(request_id, seq)
            record = self.steps.get(key)
            if record is not None:
                self.steps[key] = with_fields(record, **{OPENED_AT: now}) if seq == 0 else record
        if window.meta.early_stops or window.meta.interventions:
            self._save_open_meta(window.meta, request_id)
        return window.meta.next_seq


def fired_of(meta: WindowMeta) -> list[Fired]:
    """The interventions a window's meta keeps, as the judges read them."""
    return [
        (str(kind), str(crossed), str(action), None if step is None else int(step))
        for kind, crossed, action, step in meta.interventions
    ]


def _round(event: Iteration) -> Round:
    return Round.read(
        event.iteration,
        event.max_iterations,
        event.response or "",
        event.observation or "",
        event.exec_success,
    )


def is_terminal(event: Event) -> bool:
    return isinstance(event, FinalResponse)
