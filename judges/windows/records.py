"""What the window tables hold: one module writes and reads both record formats.

Values go through Faust's JSON changelog, so they are plain dicts. A step record is the event
as it was validated on arrival (plus its resolved `event_id`); reading it back rebuilds the
model without validating it a second time. A window's meta record is small and of fixed size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
import pydantic_core

from tracejudge.judges.inflight.early_stop import Round
from tracejudge.judges.masking.clipping import clip_whole
from tracejudge.judges.masking.redact import mask
from tracejudge.judges.rules.agent_norms import call_key
from tracejudge.models.events import (
    Event,
    FinalResponse,
    Iteration,
    ReasoningStep,
    TaskStarted,
    ToolCall,
    UserMessage,
    Validation,
    usage_of,
)
from tracejudge.models.window import ClosedBy, Fired, Window, assemble_window

_MODELS: dict[str, type[Any]] = {
    "task_started": TaskStarted,
    "user_message": UserMessage,
    "reasoning_step": ReasoningStep,
    "tool_call": ToolCall,
    "iteration": Iteration,
    "final_response": FinalResponse,
}
# Each model's fields made by a factory (an empty list): given to `model_construct` when a
# record lacks them, where pydantic would otherwise inspect the factory's signature on every
# call (about 90 µs an event read back, against 8 µs: the close of a 12,000-step run spent
# 1.6 s of the event loop there)
_FACTORIES: dict[str, tuple[tuple[str, Any], ...]] = {
    kind: tuple(
        (name, f.default_factory)
        for name, f in model.model_fields.items()
        if f.default_factory is not None
    )
    for kind, model in _MODELS.items()
}
DROPPED = "dropped"  # set on the stub of a step beyond the step limit
# On a window's first step record only: when the window's records were written (so a recovery
# knows when they are due to be written again) and its partition (for the idle scan).
OPENED_AT = "opened_at"
PARTITION = "partition"
ROUND = "round"  # on an iteration's stub: the round's early-stop signals (Round.to_record)
_NOT_EVENT_FIELDS = frozenset({DROPPED, OPENED_AT, PARTITION, "args_key", ROUND})
# A failed step beyond the step limit keeps a digest of its text: the head and tail of its
# error (or, without one, of its result) and of its arguments. A run that ends badly usually
# ends on failures, and past the limit they were only a name and "failed" to the judge. Bound:
# at most DIGEST_ERROR_CHARS + DIGEST_ARGS_CHARS characters more per failed step. Clipped by
# clip_whole: kept unmasked like every step record, and masked wherever it goes out, where a
# secret split by the cut would no longer be recognised.
DIGEST_ERROR_CHARS = 400
DIGEST_ARGS_CHARS = 200


def step_record(
    event: Event,
    *,
    beyond_limit: bool,
    extra: dict[str, Any] | None = None,
    round_: Round | None = None,
    digest: bool = False,
) -> bytes:
    """The stored form of a validated event, JSON encoded once (the table stores and sends
    these bytes as they are); beyond the step limit only its identity and, for a tool call, its
    outcome (an unrecovered failure must still count), for an iteration its round's signals
    (`round_`: early stop and the iterations used still work), and with `digest` (text may be
    kept) a failed step's digest. `extra`: the window's fields."""
    fields = dict(extra or {})
    if not beyond_limit:
        if event.event_id is None:
            fields["event_id"] = event.resolved_event_id()
        encoded = pydantic_core.to_json(event, exclude_none=True)
        # the model's JSON object with the extra fields appended: no decode and encode again
        return encoded[:-1] + b"," + orjson.dumps(fields)[1:] if fields else encoded
    stub: dict[str, Any] = {
        "type": event.type,
        "request_id": event.request_id,
        "event_id": event.resolved_event_id(),
        "step_index": event.step,
        DROPPED: True,
        **fields,
    }
    if event.ts is not None:
        stub["ts"] = event.ts  # the run's duration counts every step
    for common in ("agent_name", "agent_version", "actor"):  # blame names the step's actor
        if getattr(event, common):
            stub[common] = getattr(event, common)
    usage = usage_of(event)
    if usage is not None:  # token and cost totals count every step (norms.Tally)
        stub["usage"] = usage.model_dump(exclude_none=True)
    if isinstance(event, Iteration):
        stub.update(iteration=event.iteration, exec_success=event.exec_success)
        if event.max_iterations is not None:
            stub["max_iterations"] = event.max_iterations
        signals = (round_ or Round.read(event.iteration)).to_record()
        for name in ("c", "o"):  # short evidence, kept masked like everything that is stored
            if name in signals:
                signals[name] = mask(str(signals[name]))
        stub[ROUND] = signals
    if isinstance(event, ToolCall):
        stub.update(tool=event.tool, success=event.success)
        # a loop is found beyond the limit too (norms.Tally): the call's key, not its text
        key = call_key(event.tool, event.args_summary)
        if key is not None:
            stub["args_key"] = key
        if digest and not event.success:
            # without an error the result says what went wrong (a failed build's log)
            _digest(stub, args=event.args_summary, error=event.error)
            if not event.error and event.result_preview:
                stub["result_preview"] = clip_whole(event.result_preview, DIGEST_ERROR_CHARS)
    if digest and isinstance(event, ReasoningStep) and event.error:
        stub["phase"] = event.phase
        _digest(stub, args=None, error=event.error)
    return orjson.dumps(stub)


@dataclass(frozen=True, slots=True)
class HeldStep:
    """A step record not encoded yet: the validated event and the window's extra fields.

    A step kept only in memory (`streams/worker/windows.py`) is usually judged from memory and
    never written; encoding it on arrival and decoding it at the close cost more than the
    rules. `encode` makes the bytes `step_record` would have made, when the step is written;
    `read_step` gives the event those bytes would have given back."""

    event: Event
    extra: dict[str, Any] | None = None

    def encode(self) -> bytes:
        return step_record(self.event, beyond_limit=False, extra=self.extra)

    def read(self) -> Event:
        event = self.event
        if event.event_id is None:
            # the record carries the resolved id, and so does the event read back from it (set
            # in place: the event is the store's own, and a copy cost more than the rest here)
            object.__setattr__(event, "event_id", event.resolved_event_id())
            event.__pydantic_fields_set__.add("event_id")
        return event


def encoded(value: bytes | HeldStep) -> bytes:
    """A step record as the table stores it."""
    return value.encode() if isinstance(value, HeldStep) else value


def _digest(stub: dict[str, Any], *, args: str | None, error: str | None) -> None:
    if args:
        stub["args_summary"] = clip_whole(args, DIGEST_ARGS_CHARS)
    if error:
        stub["error"] = clip_whole(error, DIGEST_ERROR_CHARS)


def round_of_record(value: bytes | str | dict[str, Any]) -> Round:
    """An iteration's round as the early-stop check reads it, from its record or its stub."""
    record = load_record(value)
    signals = record.get(ROUND)
    if isinstance(signals, dict):
        return Round.of_record(
            int(record["iteration"]),
            record.get("max_iterations"),
            record.get("exec_success"),
            signals,
        )
    return Round.read(
        int(record["iteration"]),
        record.get("max_iterations"),
        str(record.get("response") or ""),
        str(record.get("observation") or ""),
        record.get("exec_success"),
    )


def load_record(value: bytes | str | dict[str, Any]) -> dict[str, Any]:
    """A step record as stored (bytes; a dict in changelogs of earlier versions)."""
    record: dict[str, Any] = value if isinstance(value, dict) else orjson.loads(value)
    return record


def with_fields(value: bytes | str | dict[str, Any], **fields: Any) -> bytes:
    return orjson.dumps({**load_record(value), **fields})


def read_step(value: bytes | str | dict[str, Any] | HeldStep) -> Event | None:
    """The event a step record holds, or None for a stub that carries nothing to judge."""
    if isinstance(value, HeldStep):
        return value.read()
    record = load_record(value)
    kind = record.get("type")
    # a stub carries nothing to judge, unless it is a failed reasoning step's digest
    digest = kind == "reasoning_step" and record.get("error")
    if record.get(DROPPED) and kind not in ("tool_call", "iteration") and not digest:
        return None
    fields = {k: v for k, v in record.items() if k not in _NOT_EVENT_FIELDS}
    if isinstance(fields.get("validation"), dict):
        fields["validation"] = Validation.model_construct(**fields["validation"])
    return _construct(str(kind), fields)


def _construct(kind: str, fields: dict[str, Any]) -> Event:
    factories = _FACTORIES[kind]
    if factories:
        for name, factory in factories:
            if name not in fields:
                fields[name] = factory()
    event: Event = _MODELS[kind].model_construct(**fields)
    return event


def is_stub(value: bytes | str | dict[str, Any] | HeldStep) -> bool:
    """Whether a step record is a stub (a step beyond the step limit, or with capture off)."""
    return not isinstance(value, HeldStep) and bool(load_record(value).get(DROPPED))


def read_counted(value: bytes | str | dict[str, Any] | HeldStep) -> Event:
    """The event a step record holds, a stub's too (its type, time and usage: what a budget
    counts), where `read_step` leaves out the stubs that carry nothing to judge."""
    if isinstance(value, HeldStep):
        return value.read()
    record = load_record(value)
    fields = {k: v for k, v in record.items() if k not in _NOT_EVENT_FIELDS}
    fields.pop("validation", None)
    return _construct(str(record.get("type")), fields)


def window_of(
    request_id: str,
    records: list[Any],
    *,
    closed_by: ClosedBy,
    step_count: int,
    steps_dropped: int,
    early_stops: list[tuple[str, int]],
    interventions: list[Fired] | None = None,
    events_over_cap: int = 0,
) -> Window:
    """The window its stored records (None: missing) make."""
    events = [e for r in records if r is not None and (e := read_step(r)) is not None]
    return assemble_window(
        request_id,
        events,
        closed_by=closed_by,
        step_count=step_count,
        steps_dropped=steps_dropped,
        early_stops=early_stops,
        interventions=interventions,
        events_over_cap=events_over_cap,
    )


# Keys of the meta records written before they had readable names; read for compatibility
# with changelogs of earlier versions.
_LEGACY_META_KEYS = {
    "p": "partition",
    "n": "next_seq",
    "steps": "step_count",
    "dropped": "steps_dropped",
    "late": "late_events",
    "last": "last_event_at",
    "closed": "closed_by",
    "early": "early_stops",
}


@dataclass
class WindowMeta:
    """Per request: where its records are, its counters and its state."""

    partition: int
    next_seq: int = 0  # sequence number of the next step record; records are 0..next_seq-1
    step_count: int = 0  # steps received, including those beyond the limit
    steps_dropped: int = 0  # steps beyond the limit, kept as stubs
    late_events: int = 0  # events that arrived after the window closed
    last_event_at: float = 0.0
    closed_by: str | None = None
    closed_at: float | None = None
    # offset (in its partition) of the record that closed the window: that record, delivered
    # again after a crash, re-publishes the verdict while the steps are still kept
    closed_offset: int | None = None
    flushed: int = 0  # step records in the table when it closed (the rest were only held)
    # events past the cap on events per request: counted, never kept (since the window was
    # last read in: an open window's count is in memory only)
    over_cap: int = 0
    early_stops: list[list[Any]] = field(default_factory=list)  # [action, iteration]
    interventions: list[list[Any]] = field(default_factory=list)  # [kind, crossed, action, step]

    @property
    def closed(self) -> bool:
        return bool(self.closed_by)

    def to_record(self) -> dict[str, Any]:
        # written on every event: fields at their default are left out to keep it small (and
        # no asdict(), whose deep copy would cost more than the rest of this write)
        return {
            k: v for k in _FIELDS if (v := getattr(self, k)) != _DEFAULTS[k] or k == "partition"
        }

    @classmethod
    def of_record(cls, record: dict[str, Any]) -> WindowMeta:
        known = cls.__dataclass_fields__
        values = {_LEGACY_META_KEYS.get(k, k): v for k, v in record.items()}
        return cls(**{k: v for k, v in values.items() if k in known})


_DEFAULTS = asdict(WindowMeta(partition=0))
_FIELDS = tuple(_DEFAULTS)
