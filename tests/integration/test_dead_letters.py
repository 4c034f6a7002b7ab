"""Bad messages go to the DLQ unchanged, with the reason; good ones around them are judged."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.integration.harness import WorkerProcess, consume, encode_event, produce
from tracejudge.streams.demo.samples import sample_traces

pytestmark = pytest.mark.integration


async def test_bad_messages_are_dead_lettered_and_consumption_goes_on(
    pipeline_worker: WorkerProcess,
) -> None:
    run = uuid.uuid4().hex[:6]
    rid = f"dlq-{run}"
    bad: dict[str, bytes | None] = {
        "not_json": b"this is { not json",
        "not_utf8": b'{"type": "tool_call", "request_id": "\xff\xfe"}',
        "not_object": b'[{"type": "tool_call"}]',
        "invalid_fields:request_id": json.dumps(
            {"type": "tool_call", "step_index": 1, "tool": "x", "success": True}
        ).encode(),
        "unknown_type": json.dumps({"type": "telepathy", "request_id": rid}).encode(),
        "invalid_fields:types": json.dumps(
            {
                "type": "tool_call",
                "request_id": rid,
                "step_index": "one",
                "tool": "x",
                "success": "yes",
            }
        ).encode(),
        "invalid_fields:long_id": json.dumps(
            {"type": "final_response", "request_id": "r" * 257, "output": "x"}
        ).encode(),
        "missing_type": json.dumps({"request_id": rid}).encode(),
        "empty": None,
    }
    good = sample_traces(f"dlq-good-{run}")[0]
    good_events = [encode_event(e) for e in good.events]
    bad_values = list(bad.values())
    # interleaved in one partition: a bad message before each good event, the rest after
    messages: list[tuple[bytes | None, bytes | None, int]] = []
    for i in range(max(len(bad_values), len(good_events))):
        if i < len(bad_values):
            messages.append((rid.encode(), bad_values[i], 0))
        if i < len(good_events):
            messages.append((*good_events[i], 0))
    bootstrap = pipeline_worker.settings.kafka_bootstrap
    await produce(bootstrap, pipeline_worker.topic("events"), messages)

    dead = await consume(
        bootstrap,
        pipeline_worker.topic("dlq"),
        until=lambda records: len([r for r in records if r.key == rid.encode()]) >= len(bad),
        timeout_s=60,
        settle_s=1.0,
    )
    dead = [r for r in dead if r.key == rid.encode()]
    assert [r.value for r in dead] == list(bad.values())  # unchanged, in order
    for record, expected in zip(dead, bad, strict=True):
        headers = {k: v.decode() for k, v in record.headers}
        assert headers["tracejudge-error-class"] == expected.split(":")[0]
        assert headers["tracejudge-error"]
        assert headers["tracejudge-original-topic"] == pipeline_worker.topic("events")
        assert headers["tracejudge-original-partition"] == "0"
        assert int(headers["tracejudge-original-offset"]) >= 0
    reasons = {r.value: dict(r.headers)["tracejudge-error"].decode() for r in dead}
    assert "request_id" in reasons[bad["invalid_fields:request_id"]]
    assert "step_index" in reasons[bad["invalid_fields:types"]]
    assert "success" in reasons[bad["invalid_fields:types"]]

    evaluations = await consume(
        bootstrap,
        pipeline_worker.topic("evaluations"),
        until=lambda rs: any(json.loads(r.value)["request_id"] == good.request_id for r in rs),
    )
    assert any(json.loads(r.value)["request_id"] == good.request_id for r in evaluations)
    code, health = pipeline_worker.health()
    assert code == 200 and health["counters"]["dead_lettered"] >= len(bad)


async def test_a_large_invalid_value_and_a_wrongly_keyed_event_go_to_the_dlq(
    pipeline_worker: WorkerProcess,
) -> None:
    """A 1.02 MB value (the broker takes up to 1,048,588 bytes) is dead-lettered whole, not a
    reason for the worker to exit; an event keyed by another id is refused, not split."""
    run = uuid.uuid4().hex[:6]
    huge_key, odd_key = f"huge-{run}".encode(), f"other-{run}".encode()
    huge = b"{" + b"x" * 1_020_000
    wrongly_keyed = json.dumps({"type": "task_started", "request_id": f"k-{run}", "goal": "g"})
    good = sample_traces(f"large-good-{run}")[0]
    bootstrap = pipeline_worker.settings.kafka_bootstrap
    process = pipeline_worker.process
    assert process is not None
    pid = process.pid
    await produce(
        bootstrap,
        pipeline_worker.topic("events"),
        [(huge_key, huge), (odd_key, wrongly_keyed.encode()), *map(encode_event, good.events)],
        max_request_size=2_000_000,
    )
    dead = await consume(
        bootstrap,
        pipeline_worker.topic("dlq"),
        until=lambda rs: {huge_key, odd_key} <= {r.key for r in rs},
        timeout_s=60,
    )
    by_key = {r.key: r for r in dead if r.key in (huge_key, odd_key)}
    assert by_key[huge_key].value == huge
    assert dict(by_key[huge_key].headers)["tracejudge-error-class"] == b"not_json"
    assert dict(by_key[odd_key].headers)["tracejudge-error-class"] == b"key_mismatch"
    evaluations = await consume(
        bootstrap,
        pipeline_worker.topic("evaluations"),
        until=lambda rs: any(json.loads(r.value)["request_id"] == good.request_id for r in rs),
    )
    assert any(json.loads(r.value)["request_id"] == good.request_id for r in evaluations)
    assert pipeline_worker.process is process and process.pid == pid and process.poll() is None
