"""The worker's handlers, driven with in-memory collaborators: no Kafka, no Redis."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from tests.memory import Exited, MemoryChannel, memory_worker
from tracejudge.models import names
from tracejudge.streams.demo.samples import sample_traces
from tracejudge.streams.worker.idle import MARKER_RESEND_S
from tracejudge.streams.worker.liveness import PartitionLiveness

RID = "req-1"


def start(rid: str = RID) -> dict[str, Any]:
    return {"type": "task_started", "request_id": rid, "goal": "book a flight", "step_index": 0}


def tool(i: int, ok: bool = True, rid: str = RID) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "request_id": rid,
        "step_index": i,
        "tool": "search",
        "success": ok,
        "result_preview": "3 flights found",
    }


def final(
    rid: str = RID, output: str = "Booked flight UA 12 for Monday, confirmation X1Y2."
) -> Any:
    return {"type": "final_response", "request_id": rid, "step_index": 9, "output": output}


def iteration(i: int, response: str, rid: str = RID) -> dict[str, Any]:
    return {
        "type": "iteration",
        "request_id": rid,
        "step_index": i,
        "iteration": i,
        "max_iterations": 10,
        "response": response,
    }


# --- events: the window agent's handler ---------------------------------------------------


async def test_a_final_response_gives_one_evaluation_and_closes_the_window() -> None:
    w = memory_worker()
    for event in (start(), tool(1), tool(2), final()):
        await w.event(event)
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["request_id"] == RID and evaluation["closed_by"] == "final_response"
    assert evaluation["judge_status"] == "disabled"
    assert not w.ctx.store.is_open(RID)
    assert names.REDIS_EVALUATION_KEY.format(request_id=RID) in w.lookup.data
    assert w.ctx.counters["events_added"] == 4 and w.ctx.counters["closed_by_final_response"] == 1
    assert w.channel("dlq").sent == []


async def test_every_sample_trace_gets_the_verdict_it_expects() -> None:
    w = memory_worker()
    traces = sample_traces("unit")
    for trace in traces:
        for event in trace.events:
            await w.event(event)
    w.clock.now += w.ctx.settings.idle_timeout_s + 1
    await w.ctx.idle.scan()  # the quiet trace: its marker comes back through the stream
    for marker in w.channel("events").sent:
        await w.event(marker.value, headers=marker.headers, partition=marker.partition or 0)
    got = {e["request_id"]: e for e in w.channel("evaluations").values()}
    for trace in traces:
        verdict = got[trace.request_id]
        assert (verdict["success"], verdict["incomplete"]) == (
            trace.expect_success,
            trace.expect_incomplete,
        ), trace.name
        assert verdict["closed_by"] == trace.expect_closed_by


async def test_a_duplicate_event_is_counted_and_changes_nothing() -> None:
    w = memory_worker()
    await w.event(start())
    await w.event(tool(1))
    await w.event(tool(1))
    assert w.ctx.counters["events_duplicate"] == 1
    await w.event(final())
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["step_count"] == 1


async def test_a_terminal_event_after_the_close_is_late_and_judged_once() -> None:
    w = memory_worker()
    for event in (start(), tool(1), final(), final(), tool(2)):
        await w.event(event)
    assert len(w.channel("evaluations").sent) == 1
    assert w.ctx.counters["events_late"] == 2


async def test_the_same_request_judged_twice_keeps_its_evaluation_id() -> None:
    first, second = memory_worker(), memory_worker()
    for w in (first, second):
        for event in (start(), tool(1), final()):
            await w.event(event)
    ids = {w.channel("evaluations").values()[0]["evaluation_id"] for w in (first, second)}
    assert len(ids) == 1


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (b"{not json", "not_json"),
        (b"\xff\xfe", "not_utf8"),
        (b"[1, 2]", "not_object"),
        (None, "empty"),
        ({"request_id": RID}, "missing_type"),
        ({"type": "nope", "request_id": RID}, "unknown_type"),
        ({"type": "tool_call", "request_id": RID, "step_index": "1"}, "invalid_fields"),
        # the answer under another name: dead-lettered, not judged as an empty answer
        ({"type": "final_response", "request_id": RID, "text": "done"}, "invalid_fields"),
    ],
)
async def test_bad_input_is_dead_lettered_whole_and_the_worker_goes_on(
    value: Any, code: str
) -> None:
    w = memory_worker()
    await w.event(value)
    (letter,) = w.channel("dlq").sent
    assert letter.headers[names.DLQ_ERROR_CLASS] == code.encode()
    assert letter.headers[names.DLQ_ORIGINAL_TOPIC] == b"events"
    assert letter.headers[names.DLQ_ORIGINAL_OFFSET] == b"0"
    assert letter.value == (value if isinstance(value, bytes | None) else letter.value)
    for event in (start(), final()):
        await w.event(event)
    assert len(w.channel("evaluations").sent) == 1
    assert w.ctx.counters[f"dead_lettered_{code}"] == 1


async def test_a_value_over_the_size_limit_is_dead_lettered_unparsed() -> None:
    w = memory_worker(max_event_bytes=2048)
    big = final(output="x" * 3000)
    await w.event(big)
    (letter,) = w.channel("dlq").sent
    assert letter.headers[names.DLQ_ERROR_CLASS] == b"too_large"
    assert letter.headers[names.DLQ_ORIGINAL_SIZE] == str(len(letter.value or b"")).encode()
    assert w.channel("evaluations").sent == []


async def test_a_record_too_large_to_dead_letter_whole_goes_as_a_stub() -> None:
    w = memory_worker(max_event_bytes=3500)
    w.channel("dlq").max_value_bytes = 3000  # what the producer can still send
    value = b"\xff" * 4000 + b"tail"
    await w.event(value, key=b"k" * 5000)
    (stub,) = w.channel("dlq").sent
    assert stub.headers[names.DLQ_STUB] == b"true"
    assert stub.headers[names.DLQ_ERROR_CLASS] == b"too_large"
    body = stub.json()
    assert body["size"] == len(value) and body["original_offset"] == 0
    assert body["sha256"] == hashlib.sha256(value).hexdigest()
    assert len(stub.key or b"") == 64  # an oversized key is replaced by its hash
    for event in (start(), final()):
        await w.event(event)
    assert len(w.channel("evaluations").sent) == 1  # and the worker went on


SECRET_EVENT = {
    "type": "tool_call",
    "request_id": RID,
    "step_index": "x",
    "args_summary": "card 4111 1111 1111 1111, mail ann@corp.example",
}


@pytest.mark.parametrize("payload", ["keep", "mask", "drop"])
async def test_the_dead_letter_payload_follows_the_setting(payload: str) -> None:
    w = memory_worker(dlq_payload=payload)
    raw = json.dumps(SECRET_EVENT).encode()
    await w.event(raw, key=RID.encode())
    (letter,) = w.channel("dlq").sent
    assert letter.headers[names.DLQ_PAYLOAD] == payload.encode()
    assert letter.headers[names.DLQ_ORIGINAL_SHA256] == hashlib.sha256(raw).hexdigest().encode()
    assert letter.headers[names.DLQ_ORIGINAL_SIZE] == str(len(raw)).encode()
    if payload == "keep":
        assert letter.value == raw
    elif payload == "mask":
        body = letter.json()  # still the event's JSON, its text masked
        assert body["request_id"] == RID and "[REDACTED:card_number]" in body["args_summary"]
        assert b"4111" not in (letter.value or b"") and b"ann@corp" not in (letter.value or b"")
    else:
        assert letter.value is None
    assert b"4111 1111" not in letter.headers[names.DLQ_ERROR]  # the reason, in every mode


async def test_an_event_keyed_other_than_by_its_request_id_is_refused() -> None:
    w = memory_worker()
    await w.event(start(), key=b"someone-else")
    await w.event(tool(1), key=None)  # keyed by request_id by the helper: accepted
    (letter,) = w.channel("dlq").sent
    assert letter.headers[names.DLQ_ERROR_CLASS] == b"key_mismatch"
    assert w.ctx.counters["events_added"] == 1


# --- markers: idle close and purge ----------------------------------------------------------


async def test_an_idle_window_is_closed_by_its_marker_and_a_stale_marker_does_nothing() -> None:
    w = memory_worker(idle_timeout_s=60)
    await w.event(start())
    await w.event(tool(1))
    await w.ctx.idle.scan()
    assert w.channel("events").sent == []  # not idle yet
    w.clock.now += 61
    await w.ctx.idle.scan()
    (marker,) = w.channel("events").sent
    assert marker.headers == {names.MARKER_HEADER: b"idle_close"} and marker.partition == 0
    await w.event(tool(2))  # an event arrives while the marker travels
    await w.event(marker.value, headers=marker.headers)
    assert w.channel("evaluations").sent == []
    w.clock.now += 61
    await w.event(marker.value, headers=marker.headers)
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["closed_by"] == "idle_timeout" and evaluation["incomplete"]


async def test_a_broker_outage_longer_than_the_idle_timeout_closes_no_window() -> None:
    w = memory_worker(idle_timeout_s=60)
    await w.event(start())
    w.clock.now += 30
    w.ctx.partitions.lost()  # the broker stops answering
    w.clock.now += 300
    await w.ctx.idle.scan()
    assert w.channel("events").sent == []
    w.ctx.partitions.observe({0: 1}, {0: 1})  # back, nothing left to read
    w.clock.now += 59
    await w.ctx.idle.scan()
    assert w.channel("events").sent == []  # idle counts from when consumption resumed
    await w.event(final())
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["closed_by"] == "final_response"


async def test_a_backlog_or_a_rebalance_stops_idle_time_until_caught_up() -> None:
    w = memory_worker(idle_timeout_s=60)
    await w.event(start())  # offset 0 of partition 0
    w.ctx.partitions.observe({0: 5}, {0: 1})  # four records not read yet: in flight,
    w.ctx.partitions.observe({0: 5}, {0: 1})  # then still not read at the next look: a backlog
    w.clock.now += 120
    await w.ctx.idle.scan()
    assert w.channel("events").sent == []
    for i in range(1, 5):
        await w.event(tool(i))
    w.ctx.partitions.observe({0: 5}, {0: 1})  # read (not yet committed): caught up
    w.clock.now += 60
    await w.ctx.idle.scan()
    (marker,) = w.channel("events").sent
    w.ctx.partitions.revoked()
    await w.event(marker.value, headers=marker.headers)  # marker arrives during a rebalance
    assert w.channel("evaluations").sent == []
    w.ctx.partitions.observe({0: 6}, {0: 6})
    w.clock.now += 60
    await w.event(marker.value, headers=marker.headers)
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["closed_by"] == "idle_timeout"


async def test_windows_restored_from_the_changelog_are_found_once_the_partition_is_live() -> None:
    w = memory_worker(idle_timeout_s=60)
    await w.event(start())  # written by this worker: known to the idle scan at once
    other = memory_worker(idle_timeout_s=60)
    await other.event(start("req-2"))
    w.ctx.partitions.revoked()  # a rebalance; recovery restores req-2 behind the store's back
    for mine, theirs in zip(vars(w.tables).values(), vars(other.tables).values(), strict=True):
        mine.update(theirs)
    w.clock.now += 61
    await w.ctx.idle.scan()
    assert w.channel("events").sent == []  # not live yet: recovery may still be running
    w.ctx.partitions.observe({0: 1}, {0: 1})  # rebalance and recovery over, caught up
    w.clock.now += 61
    await w.ctx.idle.scan()
    assert sorted(m.json()["request_id"] for m in w.channel("events").sent) == [RID, "req-2"]


def test_steady_traffic_is_live_a_growing_backlog_is_not() -> None:
    live = PartitionLiveness(lambda: 0.0)
    live.processed(0, 99)
    live.observe({0: 103}, {})  # first look: strict, 3 records in flight
    assert live.since(0) is None
    live.processed(0, 110)
    live.observe({0: 115}, {})  # all that was there before is done: live
    assert live.since(0) == 0.0
    live.observe({0: 140}, {})  # 111 < 115: behind what was there last time
    assert live.since(0) is None


async def test_markers_are_not_resent_until_the_last_one_came_back_or_timed_out() -> None:
    w = memory_worker(idle_timeout_s=60)
    await w.event(start())
    w.clock.now += 61
    await w.ctx.idle.scan()
    await w.ctx.idle.scan()
    assert len(w.channel("events").sent) == 1
    w.clock.now += MARKER_RESEND_S
    await w.ctx.idle.scan()
    assert len(w.channel("events").sent) == 2


async def test_a_closed_window_is_purged_after_its_retention() -> None:
    w = memory_worker(closed_retention_s=100)
    for event in (start(), final()):
        await w.event(event)
    w.clock.now += 101
    await w.ctx.idle.scan()
    (marker,) = w.channel("events").sent
    assert marker.headers[names.MARKER_HEADER] == b"purge"
    await w.event(marker.value, headers=marker.headers)
    assert RID not in w.tables.window_meta and w.ctx.counters["purged"] == 1


async def test_a_failing_scan_is_counted_and_retried_on_the_next_tick() -> None:
    w = memory_worker(idle_timeout_s=60)
    await w.event(start())
    w.clock.now += 61
    w.channel("events").fail_with = KafkaConnectionError()
    await w.ctx.idle.scan()
    assert w.ctx.counters["timer_errors"] == 1
    w.channel("events").fail_with = None
    w.clock.now += MARKER_RESEND_S
    await w.ctx.idle.scan()
    assert len(w.channel("events").sent) == 1


# --- early stop -----------------------------------------------------------------------------


async def test_a_conclusion_gives_one_stop_decision_even_when_redelivered() -> None:
    w = memory_worker()
    await w.event(iteration(1, "working on it"))
    await w.event(iteration(2, "<Conclusion>The answer is 42.</Conclusion>"))
    await w.event(iteration(2, "<Conclusion>The answer is 42.</Conclusion>"))  # duplicate
    (decision,) = w.channel("control").values()
    assert decision["action"] == "stop" and decision["iteration"] == 2
    assert names.REDIS_CONTROL_KEY.format(request_id=RID) in w.lookup.data
    await w.event(final())
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["stopped_early"] is True


async def test_no_early_stop_decision_when_it_is_off_or_too_early() -> None:
    off = memory_worker(early_stop_enabled=False)
    await off.event(iteration(2, "<Conclusion>done</Conclusion>"))
    early = memory_worker(min_iterations=3)
    await early.event(iteration(2, "<Conclusion>done</Conclusion>"))
    assert off.channel("control").sent == [] and early.channel("control").sent == []


# --- closing with the LLM judge on ----------------------------------------------------------


async def test_with_the_judge_on_a_closed_window_gets_its_rules_verdict_at_once_and_a_job() -> None:
    w = memory_worker(llm_judge_enabled=True, llm_base_url="http://127.0.0.1:9/v1")
    for event in (start(), tool(1, ok=False), final()):
        await w.event(event)
    # a verdict now, whatever the judge's queue: the rules', marked pending
    (pending,) = w.channel("evaluations").values()
    assert pending["request_id"] == RID and pending["final"] is False
    assert pending["reasons"][-1].startswith("judge pending")
    # its actions wait for the final verdict: they cannot be taken back if the judge disagrees
    assert w.channel("reflections").sent == [] and w.channel("alerts").sent == []
    (job,) = w.channel("judge_requests").values()
    assert job["facts"]["request_id"] == RID and "<data>" in job["content"]
    assert job["pending_published"] is True
    assert not w.ctx.store.is_open(RID)
    assert w.ctx.metrics.counts["evaluations"] == 0  # counted once, with its final verdict
    assert w.ctx.metrics.counts["evaluations_pending"] == 1


async def test_a_request_outside_the_sample_gets_its_rule_verdict_at_once() -> None:
    w = memory_worker(
        llm_judge_enabled=True, llm_sample_rate=0.0, llm_base_url="http://127.0.0.1:9/v1"
    )
    for event in (start(), final()):
        await w.event(event)
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["judge_status"] == "skipped" and w.channel("judge_requests").sent == []


async def test_a_judge_job_whose_model_is_unreachable_falls_back_to_rules() -> None:
    w = memory_worker(
        llm_judge_enabled=True, llm_base_url="http://127.0.0.1:9/v1", llm_max_attempts=1
    )
    for event in (start(), tool(1), final()):
        await w.event(event)
    (job,) = w.channel("judge_requests").sent
    assert w.ctx.judge_jobs is not None
    record = w.record(names.JUDGE_REQUESTS, job.value)
    await w.ctx.errors.run(record, w.ctx.judge_jobs)
    pending, evaluation = w.channel("evaluations").values()
    assert evaluation["judge_status"] == "fallback" and evaluation["llm_score"] is None
    assert evaluation["evaluation_id"] == pending["evaluation_id"]  # it replaces the pending
    assert evaluation["closed_by"] == pending["closed_by"]
    await w.ctx.errors.run(w.record(names.JUDGE_REQUESTS, b"{}"), w.ctx.judge_jobs)
    (letter,) = w.channel("dlq").sent
    assert letter.headers[names.DLQ_ERROR_CLASS] == b"ValidationError"


# --- responses: retries of generic answers --------------------------------------------------


def answer(text: str, attempt: int = 0) -> dict[str, Any]:
    return {
        "type": "model_response",
        "session_id": "s-1",
        "prompt": "Refactor the billing module to use the new payments API and add tests",
        "response": text,
        "attempt": attempt,
    }


async def test_a_generic_answer_gets_one_retry_and_a_redelivery_none() -> None:
    w = memory_worker()
    await w.response(answer("Sure! I'm ready to help you with that."))
    await w.response(answer("Sure! I'm ready to help you with that."))
    (retry,) = w.channel("retries").values()
    assert retry["type"] == "retry_request" and retry["attempt"] == 1
    assert w.ctx.counters["responses_duplicate"] == 1


async def test_retries_exhausted_give_an_alert_and_substance_gives_nothing() -> None:
    w = memory_worker(generic_max_retries=1)
    await w.response(answer("Sure! I'm ready to help you with that.", attempt=1))
    (exhausted,) = w.channel("retries").values()
    assert exhausted["type"] == "retry_exhausted"
    assert len(w.channel("alerts").sent) == 1
    fine = memory_worker()
    await fine.response(
        answer("I moved the billing calls to PaymentsClient.charge() and added 6 tests.")
    )
    assert fine.channel("retries").sent == [] and fine.ctx.counters["responses"] == 1


async def test_a_bad_response_record_is_dead_lettered() -> None:
    w = memory_worker()
    await w.response({"prompt": "x"})
    (letter,) = w.channel("dlq").sent
    assert letter.headers[names.DLQ_ORIGINAL_TOPIC] == b"responses"


# --- the error policy -----------------------------------------------------------------------


async def test_kafka_failing_while_handling_exits_for_the_supervisor() -> None:
    w = memory_worker()
    await w.event(start())
    w.channel("evaluations").fail_with = KafkaConnectionError()
    closing = w.record("events", final())
    with pytest.raises(Exited, match="kafka failure"):
        await w.ctx.errors.run(closing, w.ctx.events)
    assert w.channel("dlq").sent == [] and w.channel("evaluations").sent == []
    w.channel("evaluations").fail_with = None
    await w.ctx.errors.run(closing, w.ctx.events)  # delivered again: its verdict goes out
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["request_id"] == RID and not w.ctx.store.is_open(RID)
    await w.event(final())  # a later copy is only late
    assert len(w.channel("evaluations").sent) == 1


async def test_a_message_that_cannot_be_dead_lettered_exits() -> None:
    w = memory_worker()
    w.channel("dlq").fail_with = ValueError("too large")
    with pytest.raises(Exited, match="cannot dead-letter"):
        await w.event(b"{broken")


async def test_an_unexpected_error_is_dead_lettered_with_its_class() -> None:
    w = memory_worker()

    async def broken(record: Any) -> None:
        raise RuntimeError("bug")

    await w.ctx.errors.run(w.record("events", start()), broken)
    (letter,) = w.channel("dlq").sent
    assert letter.headers[names.DLQ_ERROR_CLASS] == b"RuntimeError"
    assert letter.headers[names.DLQ_ERROR] == b"bug"


def test_memory_channels_are_the_ones_the_context_uses() -> None:
    w = memory_worker()
    assert isinstance(w.ctx.publisher.evaluations, MemoryChannel)


async def test_published_dimension_scores_are_integers_never_null() -> None:
    # the online-evaluation design's dict[str, int]: a judge score it did not give is absent
    w = memory_worker()
    for event in (start(), tool(1), final()):
        await w.event(event)
    (evaluation,) = w.channel("evaluations").values()
    scores = evaluation["dimension_scores"]
    assert set(scores) == {"completeness", "execution_health", "efficiency"}
    assert all(isinstance(v, int) for v in scores.values())
