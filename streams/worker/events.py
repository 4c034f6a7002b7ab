"""The window agent's handler: one record of the events topic in, window state updated."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import (
    OUTSIDE_WINDOWS,
    SUMMARY_LIMIT,
    Event,
    FinalResponse,
    Iteration,
    Outcome,
    ReasoningStep,
    SessionEnd,
    decode_object,
    parse_event,
)
from tracejudge.models.names import MARKER_HEADER
from tracejudge.models.sessions import SessionMark, session_id
from tracejudge.models.signing import OutcomeKeys
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.shared.commit import later
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import deliver
from tracejudge.streams.worker.closing import WindowCloser
from tracejudge.streams.worker.early_stop import EarlyStopper
from tracejudge.streams.worker.idle import MarkerLog, Timeouts, marker_applies
from tracejudge.streams.worker.interventions import Intervener
from tracejudge.streams.worker.liveness import PartitionLiveness
from tracejudge.streams.worker.outcomes import CountingOutcomes, OutcomeTaker
from tracejudge.streams.worker.windows import Marker, WindowStore, is_terminal


@dataclass
class EventHandler:
    store: WindowStore
    closer: WindowCloser
    early_stopper: EarlyStopper | None  # None: early stop is off
    timeouts: Timeouts
    markers: MarkerLog
    liveness: PartitionLiveness
    clock: Callable[[], float]
    max_event_bytes: int | None = None
    judging: bool = True  # TRACEJUDGE_ENABLED=false: events are parsed and counted, no more
    metrics: Metrics = field(default_factory=Metrics)
    # outcome events go here, never to a window (`WorkerContext.build` wires the metrics in)
    outcomes: OutcomeTaker = field(default_factory=CountingOutcomes)
    # budgets and loops while a run runs; None: interventions off
    intervener: Intervener | None = None
    # the sources outcomes are taken from (TRACEJUDGE_OUTCOME_KEYS); None: any
    outcome_keys: OutcomeKeys | None = None

    async def __call__(self, record: InRecord) -> None:
        try:
            await self._handle(record)
        finally:  # handled, or about to be dead-lettered (or the worker exits)
            self.liveness.processed(record.partition, record.offset)

    async def _handle(self, record: InRecord) -> None:
        marker = record.headers.get(MARKER_HEADER)
        if marker is not None:
            request_id = json.loads(record.value or b"")["request_id"]
            await self.on_marker(request_id, marker.decode(), record)  # type: ignore[arg-type]
            return
        # InvalidEvent: the error policy dead-letters the record and the agent goes on
        event = self._parse(record)
        if record.key != event.request_id.encode("utf-8"):
            # Keyed otherwise, a request's events could reach two partitions (two workers) and
            # be judged twice, each half alone: refuse instead of splitting the request.
            if isinstance(event, Outcome):
                self._invalid_outcome()
            raise InvalidEvent(
                "key_mismatch",
                f"message key {record.key!r:.80} is not the event's request_id "
                f"{event.request_id!r:.80}: key every event by its request_id",
            )
        if not self.judging:
            self.metrics.counts[f"events_counted_{event.type}"] += 1
            self.metrics.event_count(event.type, "counted").inc()
            return
        rid = event.request_id
        if isinstance(event, Outcome):
            if self.outcome_keys is not None and not self.outcome_keys.verify(
                decode_object(record.value)  # as sent: what its source signed
            ):
                self.metrics.counts["outcomes_rejected"] += 1
                self.metrics.event_count(event.type, "rejected").inc()
                return  # not from a source the operator named: never joined
            # after the verdict, maybe days later: it must neither reopen nor close a window
            result = await self.outcomes.take(event, self.store.known(rid))
            self.metrics.event_count(event.type, result).inc()
            return
        if isinstance(event, SessionEnd):
            self.metrics.event_count(event.type, await self._session_end(event)).inc()
            return
        status = self.store.add(event, record.partition, self.clock(), record.offset)
        if status == "reclose":  # the verdict may not have been acknowledged: publish it again
            await self.closer.close(rid, "final_response", record.timestamp, record.offset)
            status = "duplicate"
        self.metrics.counts[f"events_{status}"] += 1
        self.metrics.event_count(event.type, status).inc()
        if self.intervener is not None and status == "added" and self.store.is_open(rid):
            # new events only: a duplicate would count twice, a late one belongs to no run
            await self.intervener.observe(event)
        stopper = self.early_stopper if isinstance(event, Iteration) else None
        if stopper is not None and status != "late" and self.store.is_open(rid):
            # also on a duplicate: a crash may have come between the event and its decision
            await stopper.check(rid, event.run_nonce)
        if isinstance(event, FinalResponse) and event.control is not None and status == "added":
            # what the agent's client did with this run's control records: an agent whose keys
            # are not the worker's shows on /metrics, /health and `tracejudge status`
            window = self.store.open.get(rid)
            agent = event.agent_name if window is None else window.tally.agent_name
            self.metrics.agents.reported_control(agent, event.control)
        # A duplicate terminal event on an open window means the close it triggered never
        # finished (the worker died in between): finish it now.
        if is_terminal(event) and status != "late" and self.store.is_open(rid):
            await self.closer.close(rid, "final_response", record.timestamp, record.offset)
        held = self.store.held(rid) if status in ("added", "replayed") else None
        if held is not None:
            # kept in memory only: acknowledged once written, or once its verdict is
            await later(held)

    async def _session_end(self, event: SessionEnd) -> str:
        """To the session agent, keyed by session: the end names its request when this worker
        knows it (the verdict waits for that request's turn), else none (final at once)."""
        turns = self.closer.session_turns
        if turns is None:
            return "ignored"  # sessions off
        rid = event.request_id
        window = self.store.open.get(rid)
        agent = event.agent_name or (None if window is None else window.tally.agent_name)
        mark = SessionMark(
            mark="ended",
            session_key=event.session_key,
            agent_name=agent,
            at=self.clock(),
            request_id=rid if self.store.known(rid) else None,
            reason=event.reason,
            ts=event.ts,
        )
        key = session_id(agent, event.session_key).encode("utf-8")
        await later(deliver(turns, key, mark.model_dump_json().encode("utf-8")))
        return "forwarded"

    def _parse(self, record: InRecord) -> Event:
        try:
            return parse_event(record.value, self.max_event_bytes)
        except InvalidEvent as exc:
            kind = _type_of(record.value, self.max_event_bytes)
            if kind == "outcome":
                self._invalid_outcome()
            elif kind in OUTSIDE_WINDOWS:
                self.metrics.event_count(str(kind), "invalid").inc()
            else:
                self._unreadable_step(record, exc)
            raise

    def _unreadable_step(self, record: InRecord, exc: InvalidEvent) -> None:
        """A record of an open run that cannot be read is dead-lettered, and its run's verdict
        says so: a step in its place, failed with the reason (what a hostile producer would
        hide by making a step unreadable shows as an error instead of vanishing). Only on this
        error path: a readable event costs nothing more."""
        rid = (record.key or b"").decode("utf-8", "replace")
        if not rid or not self.store.is_open(rid):
            return
        step = _step_of(record.value, self.max_event_bytes)
        placeholder = ReasoningStep(
            type="reasoning_step",
            request_id=rid,
            # the record's place: a redelivery is the same step, not another
            event_id=f"{rid}:unreadable:{record.partition}:{record.offset}",
            step_index=step,
            phase="tool_observation",
            intent_summary="a step tracejudge could not read (dead-lettered)",
            error=f"unreadable step ({exc.code}): {exc.reason}"[:SUMMARY_LIMIT],
        )
        self.store.add(placeholder, record.partition, self.clock(), record.offset)
        self.metrics.counts["events_unreadable_in_run"] += 1

    def _invalid_outcome(self) -> None:
        """A dead-lettered outcome, told apart from other dead letters: a label source whose
        outcomes are refused (a score of 0-100, `ok` sent as "true") shows here."""
        self.metrics.counts["outcomes_invalid"] += 1
        self.metrics.outcomes.labels("invalid").inc()
        self.metrics.event_count("outcome", "invalid").inc()

    async def on_marker(self, request_id: str, marker: Marker, record: InRecord) -> None:
        """A marker the idle scan sent through the stream; re-checked, since an event may have
        arrived after it was sent."""
        now = self.clock()
        self.markers.arrived(request_id)
        if marker == "baselines":  # not a window's: the partition's baselines to write
            if self.store.baselines is not None:
                self.metrics.counts["baselines_written"] += self.store.baselines.write(
                    record.partition, now
                )
            return
        if self.store.closed_by_record(request_id, record.partition, record.offset, now):
            # the idle close this marker made may not have been acknowledged: publish again
            await self.closer.close(request_id, "idle_timeout", None, record.offset)
            return
        if not marker_applies(
            self.store, request_id, marker, now, self.timeouts.seconds(), self.liveness.since
        ):
            return
        if marker == "idle_close":
            await self.closer.close(request_id, "idle_timeout", None, record.offset)
        elif marker == "refresh":
            self.metrics.counts["records_refreshed"] += self.store.refresh(request_id, now)
        elif marker == "flush":
            self.metrics.counts["held_steps_written"] += self.store.flush(request_id)
        else:
            self.store.purge(request_id)
            self.metrics.counts["purged"] += 1


def _step_of(value: bytes | None, max_bytes: int | None) -> int:
    """The step index an unreadable record gave, if it gave one; else 0."""
    try:
        step = decode_object(value, max_bytes).get("step_index")
    except InvalidEvent:
        return 0
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else 0


def _type_of(value: bytes | None, max_bytes: int | None) -> object:
    """The `type` of a record that failed validation, if it is a JSON object with one."""
    try:
        return decode_object(value, max_bytes).get("type")
    except InvalidEvent:
        return None
