"""Outcome events: the contract, the client's `outcome`, `publish`, and the worker
routing them past the windows (memory worker: no Kafka, no Redis)."""

from __future__ import annotations

import json
import logging
from typing import Any

import jsonschema
import pytest

from tests.memory import memory_worker
from tests.test_worker_handlers import final, start, tool
from tracejudge.client import AsyncTracer, Tracer
from tracejudge.models import names
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import Outcome, parse_event
from tracejudge.models.json_schemas import SCHEMA_DIR
from tracejudge.settings import Settings
from tracejudge.streams.cli.publish import check_lines
from tracejudge.streams.replay.engine import lines_of, replay

RID = "req-1"


def outcome(rid: str = RID, **fields: Any) -> dict[str, Any]:
    return {"type": "outcome", "request_id": rid, **fields}


# --- the contract ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "ok"),
    [
        ({"ok": True}, True),
        ({"ok": False, "score": 0.9}, False),  # `ok` decides when both are given
        ({"score": 0.5}, True),
        ({"score": 0}, False),  # an integer score is a number
        ({"score": 0.49, "source": "reward"}, False),
    ],
)
def test_an_outcome_with_ok_or_a_score_is_counted_as_ok_or_not(
    fields: dict[str, Any], ok: bool
) -> None:
    event = parse_event(outcome(**fields))
    assert isinstance(event, Outcome) and event.counted_ok is ok
    assert event.source == fields.get("source", "user")


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({}, "needs `ok`"),
        ({"source": "test"}, "needs `ok`"),
        ({"score": 1.5}, "score: Input should be less than or equal to 1"),
        ({"score": -0.1}, "score: Input should be greater than or equal to 0"),
        ({"score": float("nan")}, "score"),
        ({"score": 85}, "score"),  # a percentage is not read as a fraction: refused
        ({"ok": "true"}, "ok: Input should be a valid boolean"),
        ({"ok": True, "source": "Human"}, "source: String should match pattern"),
        ({"ok": True, "source": "code review"}, "source: String should match pattern"),
        ({"ok": True, "source": "x" * 33}, "source: String should match pattern"),
        ({"ok": True, "source": ""}, "source: String should match pattern"),
    ],
)
def test_a_malformed_outcome_is_refused_with_its_reason(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidEvent) as refused:
        parse_event(json.dumps(outcome(**fields)))
    assert refused.value.code == "invalid_fields" and says in refused.value.reason


def test_an_outcome_note_is_clipped_and_the_schema_knows_the_event() -> None:
    event = parse_event(outcome(ok=False, note="the refund never arrived. " * 200))
    assert isinstance(event, Outcome) and event.note is not None
    assert len(event.note) == 2_000 and event.clipped == ["note"]
    validator = jsonschema.Draft202012Validator(
        json.loads((SCHEMA_DIR / "event.schema.json").read_text())
    )
    validator.validate(outcome(ok=True, source="human", note="checked by hand", ts=1.0))
    validator.validate(outcome(score=0.25))
    assert list(validator.iter_errors(outcome(score=2)))
    assert list(validator.iter_errors(outcome(ok=True, source="Bad Source")))


# --- the worker -----------------------------------------------------------------------------


async def test_an_outcome_after_the_verdict_neither_reopens_the_window_nor_changes_it() -> None:
    w = memory_worker()
    for event in (start(), tool(1), final()):
        await w.event(event)
    (evaluation,) = w.channel("evaluations").values()
    closed = dict(w.tables.window_meta[RID])
    for truth in (outcome(ok=False, source="human"), outcome(score=0.9), outcome(ok=True)):
        await w.event(truth)
    assert w.channel("evaluations").values() == [evaluation]  # nothing published again
    assert w.channel("dlq").sent == []
    assert not w.ctx.store.is_open(RID) and w.tables.window_meta[RID] == closed  # no late event
    assert w.ctx.counters["outcomes_received"] == 3 and w.ctx.counters["outcomes_unknown"] == 0
    assert w.ctx.counters["events_late"] == 0
    # a later request's window is not touched either: the next final closes it as usual
    for event in (start("req-2"), outcome("req-2", ok=True), final("req-2")):
        await w.event(event)
    assert [e["request_id"] for e in w.channel("evaluations").values()] == [RID, "req-2"]


async def test_an_outcome_for_a_request_never_seen_opens_no_window() -> None:
    w = memory_worker()
    await w.event(outcome("never-seen", ok=True, source="test"))
    assert w.channel("dlq").sent == [] and w.channel("evaluations").sent == []
    assert w.ctx.store.open == {} and dict(w.tables.window_steps) == {}
    assert w.ctx.counters["outcomes_unknown"] == 1
    # the idle scan finds nothing to close for it
    w.clock.now += 10 * w.ctx.settings.idle_timeout_s
    await w.ctx.idle.scan()
    assert w.channel("events").sent == []


async def test_a_malformed_outcome_is_dead_lettered_with_its_reason() -> None:
    w = memory_worker()
    await w.event(outcome(score=7, source="reward"))
    await w.event(outcome(source="human"))
    first, second = w.channel("dlq").sent
    assert first.headers[names.DLQ_ERROR_CLASS] == b"invalid_fields"
    assert b"score: Input should be less than or equal to 1" in first.headers[names.DLQ_ERROR]
    assert b"needs `ok`" in second.headers[names.DLQ_ERROR]
    assert w.ctx.counters["outcomes_invalid"] == 2 and w.ctx.counters["outcomes_received"] == 0
    assert b'tracejudge_outcomes_total{result="invalid"} 2.0' in w.ctx.metrics.exposition()
    # keyed otherwise than by its request: refused as any event is, and counted as an outcome
    await w.event(outcome(ok=True), key=b"another")
    assert w.channel("dlq").sent[-1].headers[names.DLQ_ERROR_CLASS] == b"key_mismatch"
    assert w.ctx.counters["outcomes_invalid"] == 3


async def test_with_judging_off_an_outcome_is_counted_and_dropped() -> None:
    w = memory_worker(enabled=False)
    await w.event(outcome(ok=True))
    assert w.ctx.counters["events_counted_outcome"] == 1
    assert w.ctx.counters["outcomes_received"] == 0 and w.channel("dlq").sent == []


async def test_a_taker_given_to_the_worker_gets_each_outcome_and_whether_it_is_known() -> None:
    taken: list[tuple[str, bool]] = []

    class Taker:
        async def take(self, event: Outcome, known: bool) -> str:
            taken.append((event.request_id, known))
            return "joined"

    from tests.memory import Clock, MemoryChannel
    from tracejudge.streams.replay.engine import MemoryLookup
    from tracejudge.streams.worker.context import Channels, Tables, WorkerContext

    channels = Channels(*(MemoryChannel() for _ in range(8)))
    ctx = WorkerContext.build(
        Settings(redis_url=""),
        channels,
        Tables({}, {}, {}),
        None,
        lookup=MemoryLookup(),
        clock=Clock(),
        outcomes=lambda _metrics: Taker(),
    )
    ctx.partitions.observe({0: 0}, {})
    from tracejudge.streams.kafka.records import InRecord

    def record(offset: int, value: dict[str, Any]) -> InRecord:
        key = value["request_id"].encode()
        return InRecord("events", 0, offset, key, json.dumps(value).encode(), {})

    values = [start(), outcome(ok=True), final(), outcome(ok=False), outcome("other", ok=True)]
    for offset, value in enumerate(values):
        await ctx.errors.run(record(offset, value), ctx.events)
    assert taken == [(RID, True), (RID, True), ("other", False)]
    assert ctx.metrics.counts["dead_lettered"] == 0


async def test_a_replay_passes_outcomes_by_and_judges_as_without_them() -> None:
    events = [start(), tool(1), final(), start("req-2"), tool(1, ok=False, rid="req-2")]
    truths = [outcome(ok=True), outcome("req-2", ok=False, source="human"), outcome("x", ok=True)]
    plain = [(e["request_id"].encode(), json.dumps(e).encode()) for e in events]
    raw = "\n".join(json.dumps(e) for e in [*events[:3], truths[0], *events[3:], *truths[1:]])
    settings = Settings(redis_url="")
    without, with_ = await replay(settings, plain), await replay(settings, lines_of(raw.encode()))
    assert with_.dead_letters == 0 and with_.events == len(events) + len(truths)

    def verdicts(evaluations: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {r: (e["overall_score"], e["closed_by"]) for r, e in evaluations.items()}

    assert verdicts(with_.evaluations) == verdicts(without.evaluations)
    assert set(with_.evaluations) == {RID, "req-2"}  # none made for the outcome of "x"


# --- publish and the client ------------------------------------------------------------------


def test_publish_accepts_outcome_lines_and_names_the_bad_ones() -> None:
    lines = [
        json.dumps(outcome(ok=True, source="test")).encode(),
        json.dumps(outcome(score=0.2, note="thumbs down", label_id="q-9")).encode(),
        json.dumps(outcome(score=3)).encode(),
    ]
    checked = check_lines(lines)
    assert checked.good_numbers == [1, 2]
    (bad,) = checked.bad
    assert bad.line == 3 and "score" in bad.reason
    (warning,) = checked.warnings  # an unknown field is named, not refused
    assert warning.line == 2 and "outcome: unknown field label_id" in warning.reason


def test_a_bad_outcome_from_the_client_is_dropped_counted_and_logged_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # nothing listens on port 9: nothing is sent anyway, and nothing waits for it
    tracer = Tracer("127.0.0.1:9", warn_interval_s=0)
    try:
        with caplog.at_level(logging.WARNING, logger="tracejudge.client"):
            assert tracer.outcome(RID) is False  # neither ok nor score
            assert tracer.outcome(RID, score=1.5) is False
            assert tracer.outcome(RID, ok=True, source="Code Review") is False
            assert tracer.outcome(None, ok=True) is False  # type: ignore[arg-type]
            assert tracer.outcome(RID, ok="yes") is False  # type: ignore[arg-type]
            assert tracer.outcome(RID, ok=True, note=object()) is False  # type: ignore[arg-type]
        assert tracer.dropped == 6 and tracer.queued == 0
        assert "an outcome refused" in caplog.text and "score" in caplog.text
        assert tracer.outcome(RID, ok=True, source="test") is True and tracer.queued == 1
    finally:
        tracer.close(0)


async def test_the_async_tracer_has_the_same_outcome() -> None:
    tracer = AsyncTracer("127.0.0.1:9")
    try:
        assert tracer.outcome(RID, score=0.8, source="reward") is True
        assert tracer.outcome(RID, score=-1) is False and tracer.dropped == 1
    finally:
        await tracer.close(0)
