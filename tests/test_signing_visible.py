"""Signing mistakes are seen where operators look: a refused control record says why in words
an operator acts on (unsigned, a key the agent does not hold, a key past its day, a signature
its key did not make), the agent's client counts each kind and reports them with the run's
final response, and the worker shows, per agent, what its clients refused beside whether it
signs and with which key (/metrics, /health, `tracejudge status`)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from tests.memory import memory_worker
from tests.test_intervention_reader import dead_address, intervention, recorder
from tracejudge.client import InterventionReader
from tracejudge.models.events import parse_event
from tracejudge.models.signing import ControlKeys, new_mac_key, signed, signed_with
from tracejudge.streams.kafka.status import control_lines
from tracejudge.streams.worker.health import health_report

WORKER = new_mac_key("prod-2026")
OTHER = new_mac_key("staging")


def keys(text: str) -> ControlKeys:
    found = ControlKeys.parse(text)
    assert found is not None
    return found


def test_a_refused_record_says_why() -> None:
    agent = keys(WORKER)
    record = json.loads(signed(intervention("r1"), keys(WORKER)))
    assert agent.verify(record) and signed_with(record) == "hmac:prod-2026"
    unsigned = json.loads(intervention("r1"))
    assert (signed_with(unsigned), agent.why_not(unsigned)) == (None, "unsigned")
    theirs = json.loads(signed(intervention("r1"), keys(OTHER)))
    assert agent.why_not(theirs) == "unknown_key"  # another deployment's key
    changed = {**record, "action": "steer"}
    assert not agent.verify(changed) and agent.why_not(changed) == "bad_signature"
    dated = keys(WORKER + "@2020-01-01")
    assert not dated.verify(record) and dated.why_not(record) == "expired_key"
    assert agent.signing_key == "hmac:prod-2026" and agent.key_ids == ("hmac:prod-2026",)
    # a key id is the record's own text: repeated in a log line only when well formed
    hostile = {**record, "signature": "ed25519:\x1b[2J\nforged-line:AAAA"}
    assert signed_with(hostile) == "unknown" and agent.why_not(hostile) == "unknown_key"


@pytest.fixture
def reader() -> Any:
    reader = InterventionReader(
        dead_address(), "t.control", {}, warn_interval_s=0, keys=keys(WORKER)
    )
    yield reader
    reader.close()


def test_the_client_counts_each_refusal_and_reports_them_with_the_answer(
    reader: InterventionReader, caplog: pytest.LogCaptureFixture
) -> None:
    req, sent = recorder(reader)
    key = req.request_id.encode()
    with caplog.at_level(logging.WARNING, logger="tracejudge.client"):
        reader._take(key, intervention(req.request_id))
        reader._take(key, signed(intervention(req.request_id), keys(OTHER)))
        reader._take(key, signed(intervention(req.request_id, crossed="x"), keys(OTHER)))
    said = caplog.text
    assert "with no signature" in said
    assert "signed with key hmac:staging, which this agent does not hold" in said
    assert "the worker's TRACEJUDGE_CONTROL_KEYS and this agent's differ" in said
    assert not req.should_stop()
    assert reader.counts() == {
        "delivered": 0,
        "unverified": 0,
        "unreadable": 0,
        "refused_unknown_key": 2,
        "refused_unsigned": 1,
    }
    reader._take(key, signed(intervention(req.request_id, action="steer"), keys(WORKER)))
    req.final("done")
    final = parse_event(sent[-1])
    assert final.control is not None  # type: ignore[union-attr]
    assert final.control.model_dump() == {  # type: ignore[union-attr]
        "verifies": True,
        "delivered": 1,
        "refused": {"unsigned": 1, "unknown_key": 2},
        "unverified": 0,
        "read": [],  # the steer was never handed to a model
    }


def test_a_client_without_keys_obeys_signed_records_but_says_and_counts_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = InterventionReader(dead_address(), "t.control", {}, warn_interval_s=0)
    try:
        req, sent = recorder(reader)
        with caplog.at_level(logging.WARNING, logger="tracejudge.client"):
            reader._take(
                req.request_id.encode(), signed(intervention(req.request_id), keys(WORKER))
            )
        assert req.should_stop()  # as before: no keys, no check
        assert "obeyed without checking it" in caplog.text and "hmac:prod-2026" in caplog.text
        req.final("stopped")
        control = parse_event(sent[-1]).control  # type: ignore[union-attr]
        assert control is not None and (control.verifies, control.unverified) == (False, 1)
    finally:
        reader.close()


def final(rid: str, agent: str, control: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [
        {"type": "task_started", "request_id": rid, "goal": "refund", "agent_name": agent},
        {"type": "final_response", "request_id": rid, "output": "done", "control": control},
    ]


async def test_the_worker_shows_what_each_agent_refused_and_how_it_signs() -> None:
    w = memory_worker(control_keys=WORKER)
    refusing = {"verifies": True, "delivered": 0, "refused": {"unknown_key": 2}}
    for event in [
        *final("a1", "support-eu", refusing),
        *final("a2", "support-us", {"verifies": False, "delivered": 1, "unverified": 1}),
        *final("a3", "support-ok", {"verifies": True, "delivered": 1}),
        *final("a4", "support-old", None),  # an older client reports nothing
    ]:
        await w.event(event)
    body, _ = health_report(w.ctx, recovered=True, rebalancing=False, stalled=False)
    control = body["control"]
    assert (control["signs"], control["key"]) == (True, "hmac:prod-2026")
    assert control["agents"]["support-eu"]["refused_unknown_key"] == 2
    assert control["agents"]["support-us"]["runs_not_verifying"] == 1
    assert "support-old" not in control["agents"]
    exposed = w.ctx.metrics.exposition().decode()
    assert (
        'tracejudge_agent_control_records_total{agent="support-eu",outcome="refused_unknown_key"}'
        " 2.0" in exposed
    )
    lines = "\n".join(control_lines(control))
    assert "signs control with hmac:prod-2026" in lines
    assert (
        "agent support-eu: refused 2 (2 unknown_key): its TRACEJUDGE_CONTROL_KEYS and the "
        "worker's differ" in lines
    )
    assert "agent support-us: 1 of 1 runs hold no key (obeyed unchecked)" in lines
    assert "support-ok" not in lines  # nothing to say about an agent that verifies and obeys


async def test_a_worker_that_does_not_sign_says_so() -> None:
    w = memory_worker()
    body, _ = health_report(w.ctx, recovered=True, rebalancing=False, stalled=False)
    assert body["control"] == {"signs": False, "key": None, "agents": {}}
    assert "signs no control record" in control_lines(body["control"])[0]


def test_a_control_report_a_worker_cannot_read_never_costs_the_answer() -> None:
    event = parse_event(
        {"type": "final_response", "request_id": "r", "output": "ok", "control": {"verifies": 3}}
    )
    assert event.output == "ok" and event.control is None  # type: ignore[union-attr]
