"""An evaluation as an OpenTelemetry `gen_ai.evaluation.result` log record (pure)."""

from __future__ import annotations

from typing import Any

from tracejudge.client.otel_mapping import SpanInfo, events_of
from tracejudge.models.events import parse_event
from tracejudge.streams.shared.evaluation_export import EVENT_NAME, headers_of, record_of

EVALUATION: dict[str, Any] = {
    "request_id": "r1",
    "evaluation_id": "e1",
    "overall_score": 59,
    "passed": False,
    "success": False,
    "incomplete": True,
    "judge_status": "disabled",
    "summary": "the refund failed",
    "agent_name": "support-bot",
    "ts": 1764000000.5,
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "span_id": "00f067aa0ba902b7",
}


def test_an_evaluation_becomes_one_event_on_its_span() -> None:
    record = record_of(EVALUATION)
    attrs = {kv.key: kv.value for kv in record.attributes}
    assert record.event_name == EVENT_NAME == "gen_ai.evaluation.result"
    assert record.trace_id.hex() == EVALUATION["trace_id"]
    assert record.span_id.hex() == EVALUATION["span_id"]
    assert record.time_unix_nano == 1764000000500000000
    assert attrs["gen_ai.evaluation.score.value"].double_value == 59.0
    assert attrs["gen_ai.evaluation.score.label"].string_value == "fail"
    assert attrs["gen_ai.evaluation.explanation"].string_value == "the refund failed"
    assert attrs["tracejudge.quadrant"].string_value == "failure_incomplete"
    assert attrs["gen_ai.agent.name"].string_value == "support-bot"


def test_the_blamed_step_and_the_work_left_go_with_it() -> None:
    blame = {"step_index": 2, "actor": "refund", "reason": "gateway timeout", "confidence": 0.6,
             "source": "rules", "abstain": False}  # fmt: skip
    left = ["refund({\"order_id\": 7}): step 2 failed ('gateway timeout')"]
    record = record_of({**EVALUATION, "blame": blame, "remaining_steps": left})
    attrs = {kv.key: kv.value for kv in record.attributes}
    assert attrs["tracejudge.blame.step_index"].int_value == 2
    assert attrs["tracejudge.blame.actor"].string_value == "refund"
    assert attrs["tracejudge.blame.confidence"].double_value == 0.6
    assert attrs["tracejudge.blame.abstain"].bool_value is False
    assert attrs["tracejudge.remaining_steps"].string_value == left[0]
    clean = {kv.key for kv in record_of(EVALUATION).attributes}
    assert not any(k.startswith("tracejudge.blame") for k in clean)


def test_without_a_trace_the_event_is_not_linked() -> None:
    record = record_of({**EVALUATION, "trace_id": None, "span_id": "00f067aa0ba902b7"})
    assert record.trace_id == b"" and record.span_id == b""


def test_headers_are_read_as_otel_writes_them() -> None:
    assert headers_of("x-api-key=abc, authorization=Bearer t=1") == {
        "x-api-key": "abc",
        "authorization": "Bearer t=1",
    }
    assert headers_of("") == {}


def test_a_root_span_gives_the_request_its_trace_and_span() -> None:
    root = SpanInfo(
        "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "", "invoke_agent", 1, 2, {}, 0, ""
    )
    started = parse_event(events_of(root, capture_content=False)[0])
    assert started.type == "task_started"
    assert (started.trace_id, started.span_id) == (root.trace_id, root.span_id)
