"""A signed control record belongs to one run of one deployment, under one key, until its
last day: a stop captured from an earlier run of the same request id (even seconds before the
re-run, inside the clock-skew allowance) never stops the re-run; an HMAC record names its key
and is bound to the topic prefix; an older early-stop decision never replaces a newer one; and
a worker publishing unsigned records says so in its metrics."""

from __future__ import annotations

import json
import time
from datetime import date
from typing import Any

import pytest

from tests import test_interventions as looping
from tests import test_worker_handlers as handlers
from tests.memory import memory_worker
from tests.test_intervention_reader import dead_address, intervention, recorder
from tracejudge.client import InterventionReader
from tracejudge.client.early_stop import _read
from tracejudge.models.events import parse_event
from tracejudge.models.outputs import EarlyStopDecision
from tracejudge.models.signing import SIGNATURE, ControlKeyError, ControlKeys

SECRET = "0123456789abcdef" * 4
KEYS = ControlKeys.parse(f"hmac:ops-1:{SECRET}")
assert KEYS is not None


def keys(text: str, prefix: str = "tracejudge.") -> ControlKeys:
    parsed = ControlKeys.parse(text)
    assert parsed is not None
    return parsed.for_deployment(prefix)


@pytest.fixture
def reader() -> Any:
    reader = InterventionReader(
        dead_address(), "t.control", {}, warn_interval_s=3600, keys=keys(f"hmac:ops-1:{SECRET}")
    )
    yield reader
    reader.close()


def test_a_stop_captured_from_the_run_before_does_not_stop_the_rerun(
    reader: InterventionReader,
) -> None:
    """The same request id run again 25 s after a stop was signed for its first run: the
    stop's time is within the 30 s allowed for clocks apart, its nonce is the first run's."""
    signer = keys(f"hmac:ops-1:{SECRET}")
    first, _ = recorder(reader)
    captured = signer.sign(
        intervention(first.request_id, ts=time.time() - 25, run_nonce=first.run_nonce)
    )
    rerun, _ = recorder(reader, request_id=first.request_id)  # watched again: a new run
    assert rerun.run_nonce != first.run_nonce
    reader._take(rerun.request_id.encode(), captured)
    assert not rerun.should_stop() and reader.rejected == 1
    ours = signer.sign(intervention(rerun.request_id, run_nonce=rerun.run_nonce))
    reader._take(rerun.request_id.encode(), ours)
    assert rerun.should_stop() and reader.delivered == 1


def test_the_nonce_cannot_be_moved_to_another_run(reader: InterventionReader) -> None:
    signer = keys(f"hmac:ops-1:{SECRET}")
    req, _ = recorder(reader)
    theirs = json.loads(signer.sign(intervention(req.request_id, run_nonce="earlier-run-1")))
    theirs["run_nonce"] = req.run_nonce  # moved to this run after signing
    reader._take(req.request_id.encode(), json.dumps(theirs).encode())
    assert not req.should_stop() and reader.rejected == 1


def test_every_event_of_a_run_carries_its_nonce_and_the_worker_signs_it_back() -> None:
    req, sent = recorder(None)  # type: ignore[arg-type]
    req.tool_call("search", args="q", success=True, result="r")
    req.final("done")
    assert {e["run_nonce"] for e in sent} == {req.run_nonce}
    for event in sent:
        parse_event(json.dumps(event).encode())  # of the contract
    other, _ = recorder(None)  # type: ignore[arg-type]
    assert other.run_nonce != req.run_nonce and len(req.run_nonce) >= 16


async def test_the_worker_copies_the_crossing_events_nonce_into_what_it_signs() -> None:
    w = memory_worker(control_keys=f"hmac:ops-1:{SECRET}")
    nonce = {"run_nonce": "run-AAAAAAAAAAAA"}
    await w.event({**looping.start(), **nonce})
    for i in range(1, 4):
        await w.event({**looping.call(i, "BUILD FAILURE", ok=False), **nonce})
    (told,) = w.channel("control").values()
    assert told["run_nonce"] == "run-AAAAAAAAAAAA"
    assert told[SIGNATURE].startswith("hmac-sha256:ops-1:")
    assert keys(f"hmac:ops-1:{SECRET}").verify(told)

    early = memory_worker(control_keys=f"hmac:ops-1:{SECRET}")
    await early.event({**handlers.iteration(1, "working on it"), **nonce})
    await early.event({**handlers.iteration(2, "<Conclusion>42.</Conclusion>"), **nonce})
    (decided,) = early.channel("control").values()
    assert decided["run_nonce"] == "run-AAAAAAAAAAAA"
    raw = json.dumps(decided).encode()
    signer = keys(f"hmac:ops-1:{SECRET}")
    assert _read(raw, handlers.RID, signer, run_nonce="run-AAAAAAAAAAAA")[1]
    assert _read(raw, handlers.RID, signer, run_nonce="run-BBBBBBBBBBBB") == (None, False)


def test_an_hmac_record_is_bound_to_its_deployment_and_names_its_key() -> None:
    production, staging = keys(f"hmac:ops-1:{SECRET}"), keys(f"hmac:ops-1:{SECRET}", "staging.")
    record = json.loads(staging.sign(intervention("r1")))
    assert record[SIGNATURE].startswith("hmac-sha256:ops-1:")
    assert staging.verify(record) and not production.verify(record)
    # the same secret under another id, or the id stripped to pass as a bare key's record
    assert not keys(f"hmac:ops-2:{SECRET}", "staging.").verify(record)
    stripped = {**record, SIGNATURE: "hmac-sha256:" + record[SIGNATURE].rsplit(":", 1)[1]}
    assert not staging.verify(stripped) and not keys(SECRET, "staging.").verify(stripped)


def test_an_hmac_key_is_refused_after_its_last_day_and_rotates() -> None:
    dated = keys(f"hmac:ops-1:{SECRET}@2026-12-31")
    record = json.loads(dated.sign(intervention("r1")))
    assert dated.verify(record, today=date(2026, 12, 31))
    assert not dated.verify(record, today=date(2027, 1, 1))
    new = "f" * 64
    rotating = keys(f"hmac:ops-2:{new},hmac:ops-1:{SECRET}")
    assert rotating.verify(record)  # the old key's records, while agents move to the new
    by_new = json.loads(rotating.sign(intervention("r1")))
    assert by_new[SIGNATURE].startswith("hmac-sha256:ops-2:") and not dated.verify(by_new)


def test_a_bare_key_verifies_its_records_as_it_always_did() -> None:
    bare = keys(SECRET)
    record = json.loads(bare.sign(intervention("r1")))
    assert record[SIGNATURE].count(":") == 1 and bare.verify(record)
    assert not keys(f"hmac:ops-1:{SECRET}").verify(record)  # an id'd key takes no bare record


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("hmac:ops-1", "hmac:KID:SECRET"),
        ("hmac:bad id!:" + SECRET, "a key id is"),
        ("hmac:ops-1:short", "shorter than 32"),
        (f"hmac:ops-1:{SECRET}@2026-02-30", "no such day"),
    ],
)
def test_an_hmac_entry_that_cannot_be_read_says_why(entry: str, says: str) -> None:
    with pytest.raises(ControlKeyError, match=says):
        ControlKeys.parse(entry)


def test_a_new_hmac_key_is_one_entry_for_both_sides() -> None:
    # imported here, as other new names: each test fails on its own on code without them
    from tracejudge.models.signing import new_mac_key

    entry = new_mac_key("ops-3")
    both = keys(entry)
    assert both.verify(json.loads(both.sign(intervention("r1"))))


def decision(iteration: int, action: str, ts: float) -> EarlyStopDecision:
    return EarlyStopDecision(
        decision_id=f"d{iteration}",
        request_id="r1",
        iteration=iteration,
        action=action,  # type: ignore[arg-type]
        reason="conclusion",
        evidence="",
        ts=ts,
    )


def test_an_older_decision_never_replaces_a_newer_one() -> None:
    from tracejudge.client.early_stop import LatestDecisions

    latest = LatestDecisions()
    stop = decision(3, "stop", 1_000.0)
    assert latest.keep("r1", stop) is stop
    assert latest.keep("r1", decision(2, "hint", 990.0)) is stop  # a hint put back over it
    assert latest.keep("r1", None) is stop  # the key deleted, or a record refused
    later = decision(4, "finalize", 1_010.0)
    assert latest.keep("r1", later) is later


async def test_a_worker_without_keys_counts_the_unsigned_records_it_publishes() -> None:
    for keys_set, label in (("", "none"), (f"hmac:ops-1:{SECRET}", "hmac")):
        w = memory_worker(control_keys=keys_set)
        await w.event(handlers.iteration(1, "working on it"))
        await w.event(handlers.iteration(2, "<Conclusion>The answer is 42.</Conclusion>"))
        count = w.ctx.metrics.registry.get_sample_value(
            "tracejudge_control_records_total", {"signature": label}
        )
        assert count == 1


def test_a_malformed_nonce_costs_the_step_nothing() -> None:
    """A producer's nonce of the wrong shape is read as none: the step is judged, the run's
    records fall back to the time rule."""
    for given in ("short", "x" * 65, "has space in it", 12345678, None):
        event = parse_event(
            json.dumps(
                {
                    "type": "tool_call",
                    "request_id": "r1",
                    "step_index": 1,
                    "tool": "search",
                    "success": True,
                    "run_nonce": given,
                }
            ).encode()
        )
        assert event.run_nonce is None
    kept = parse_event(
        b'{"type":"task_started","request_id":"r1","goal":"g","run_nonce":"AbC_-123"}'
    )
    assert kept.run_nonce == "AbC_-123"


def test_a_decision_kept_from_an_earlier_run_is_not_answered_for_this_one() -> None:
    from tracejudge.client.early_stop import LatestDecisions

    latest = LatestDecisions()
    earlier = decision(5, "stop", 1_000.0).model_copy(update={"run_nonce": "run-one-1234"})
    assert latest.keep("r1", earlier, run_nonce="run-one-1234") is earlier
    # the same request id run again: its first decision is at iteration 2
    now = decision(2, "hint", 2_000.0).model_copy(update={"run_nonce": "run-two-1234"})
    assert latest.get("r1", since=1_990.0, run_nonce="run-two-1234") is None
    assert latest.keep("r1", now, since=1_990.0, run_nonce="run-two-1234") is now
