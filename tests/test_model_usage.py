"""Model calls in the contract: usage on the steps a model produced, totals in the evaluation,
exact beyond the step limit, and old events without usage still valid."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tracejudge.judges.rules.agent_norms import Tally
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.judges.verdict.make import Closing, Judging, make_verdict
from tracejudge.judges.windows.records import load_record, step_record
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import parse_event
from tracejudge.models.outputs import Evaluation, Usage
from tracejudge.streams.shared.metrics import MAX_AGENT_LABELS, OTHER_AGENTS, AgentMetrics

JUDGING = Judging(tool_call_budget=12, policy=Policy(), version="test", llm=None, timelines="all")


def run(usage: bool) -> list[dict[str, Any]]:
    def used(model: str, tokens_in: int, tokens_out: int, cost: float | None) -> dict[str, Any]:
        if not usage:
            return {}
        given: dict[str, Any] = {
            "model": model,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "latency_ms": 420,
        }
        return {"usage": given if cost is None else {**given, "cost_usd": cost}}

    return [
        {"type": "task_started", "request_id": "u1", "goal": "refund order 7"},
        {
            "type": "reasoning_step",
            "request_id": "u1",
            "step_index": 1,
            "phase": "plan",
            "intent_summary": "look the order up",
            **used("gpt-4o-mini", 1200, 80, 0.0003),
        },
        {
            "type": "tool_call",
            "request_id": "u1",
            "step_index": 2,
            "tool": "get_order",
            "success": True,
        },
        {
            "type": "reasoning_step",
            "request_id": "u1",
            "step_index": 3,
            "phase": "synthesis",
            "intent_summary": "refund it",
            **used("gpt-4o", 1500, 60, None),
        },
        {
            "type": "final_response",
            "request_id": "u1",
            "output": "Refunded order 7: 20 EUR back to the card.",
            **used("gpt-4o-mini", 1700, 40, 0.0004),
        },
    ]


def evaluation(events: list[dict[str, Any]], beyond_limit: bool = False) -> Evaluation:
    parsed = [parse_event(e) for e in events]
    records = [
        step_record(e, beyond_limit=beyond_limit and e.type == "reasoning_step") for e in parsed
    ]
    tally = Tally()
    for record in records:  # as the worker counts, from what it stored
        tally.add_record(load_record(record))
    closing = Closing("u1", "final_response", records, 3, 0, [], 1e9, None, tally.stats())
    made = make_verdict(JUDGING, closing)
    assert made.evaluation is not None
    return Evaluation.model_validate_json(made.evaluation)


def test_the_evaluation_sums_the_model_calls_of_the_request() -> None:
    usage = evaluation(run(usage=True)).usage
    assert usage is not None
    assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (3, 4400, 180)
    assert usage.cost_usd == pytest.approx(0.0007)  # the call without a cost adds none
    assert usage.models == ["gpt-4o-mini", "gpt-4o"]


def test_steps_beyond_the_limit_still_count_their_usage() -> None:
    assert evaluation(run(usage=True), beyond_limit=True).usage == evaluation(run(True)).usage


def test_events_without_usage_are_valid_and_give_no_totals() -> None:
    assert evaluation(run(usage=False)).usage is None


def test_usage_is_checked_like_the_rest_of_the_contract() -> None:
    bad = {**run(usage=True)[1], "usage": {"input_tokens": -5}}
    with pytest.raises(InvalidEvent, match="input_tokens"):
        parse_event(json.dumps(bad))
    text = {**run(usage=True)[1], "usage": {"input_tokens": "12"}}  # strict: no coercion
    with pytest.raises(InvalidEvent):
        parse_event(json.dumps(text))


def test_agent_labels_are_bounded() -> None:
    usage_metrics = AgentMetrics(CollectorRegistry())
    total = Usage(model_calls=1, input_tokens=10, output_tokens=2, cost_usd=0.01)
    for i in range(MAX_AGENT_LABELS + 50):
        usage_metrics.add(f"agent-{i}", total)
    usage_metrics.add(None, total)
    labels = {
        s.labels["agent"]
        for family in usage_metrics.calls.collect()
        for s in family.samples
        if s.name.endswith("_total")
    }
    assert len(labels) == MAX_AGENT_LABELS + 1 and OTHER_AGENTS in labels
    assert "agent-0" in labels and f"agent-{MAX_AGENT_LABELS}" not in labels
    other = usage_metrics.tokens.labels(OTHER_AGENTS, "input")._value.get()
    assert other == 10 * 51  # the 50 past the cap and the unnamed one


def test_the_timeline_keeps_each_steps_usage_and_counts_come_from_the_window_too() -> None:
    parsed = [parse_event(e) for e in run(usage=True)]
    records = [step_record(e, beyond_limit=False) for e in parsed]
    closing = Closing("u1", "final_response", records, 3, 0, [], 1e9, None)  # no stats given
    made = make_verdict(JUDGING, closing)
    assert made.evaluation is not None and made.timeline is not None
    assert Evaluation.model_validate_json(made.evaluation).usage is not None
    timeline = json.loads(made.timeline)
    assert [t["usage"]["model"] for t in timeline if "usage" in t] == [
        "gpt-4o-mini",
        "gpt-4o",
        "gpt-4o-mini",
    ]


def test_flagged_keeps_the_timelines_of_the_requests_someone_will_open() -> None:
    flagged = Judging(12, Policy(), "test", None, timelines="flagged")
    good = [parse_event(e) for e in run(usage=False)]
    failed = [*good[:-1], parse_event({**run(usage=False)[2], "success": False}), good[-1]]
    kept = []
    for events in (good, failed):
        records = [step_record(e, beyond_limit=False) for e in events]
        made = make_verdict(flagged, Closing("u1", "final_response", records, 3, 0, [], 1e9, None))
        kept.append(made.timeline is not None)
    assert kept == [False, True]
