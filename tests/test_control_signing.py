"""Signed control records: with keys set, a forged, altered, moved or replayed intervention or
early-stop decision never reaches `should_stop()` or an early-stop check; a signed one does."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests import test_interventions as looping
from tests import test_worker_handlers as handlers
from tests.memory import memory_worker
from tests.test_intervention_reader import dead_address, intervention, recorder
from tracejudge.client import InterventionReader
from tracejudge.client.early_stop import _read
from tracejudge.client.events import outcome_event
from tracejudge.models.names import REDIS_CONTROL_KEY
from tracejudge.models.signing import SIGNATURE, ControlKeyError, ControlKeys, OutcomeKeys, signed

KEY = "k" * 16 + "0123456789abcdef0123"  # 36 characters
OTHER = "z" * 40
KEYS = ControlKeys.parse(KEY)


def sign(record: bytes, keys: ControlKeys | None = KEYS) -> bytes:
    return signed(record, keys)


@pytest.fixture
def reader() -> Any:
    reader = InterventionReader(dead_address(), "t.control", {}, warn_interval_s=3600, keys=KEYS)
    yield reader
    reader.close()


def test_a_signed_record_verifies_with_its_key_only() -> None:
    assert KEYS is not None
    record = json.loads(sign(intervention("r1")))
    assert record[SIGNATURE].startswith("hmac-sha256:")
    assert KEYS.verify(record)
    other = ControlKeys.parse(OTHER)
    assert other is not None and not other.verify(record)


@pytest.mark.parametrize(
    "change",
    [
        {"action": "steer"},
        {"request_id": "someone-else"},
        {"ts": 1.0},
        {"message": "stop now"},
        {"extra": "a field added"},
    ],
)
def test_any_change_to_a_signed_record_fails(change: dict[str, Any]) -> None:
    assert KEYS is not None
    record = {**json.loads(sign(intervention("r1"))), **change}
    assert not KEYS.verify(record)


def test_a_record_without_or_with_a_malformed_signature_fails() -> None:
    assert KEYS is not None
    record = json.loads(intervention("r1"))
    assert not KEYS.verify(record)
    assert not KEYS.verify({**record, SIGNATURE: "sha1:abc"})
    assert not KEYS.verify({**record, SIGNATURE: 12})


def test_keys_rotate_the_first_signs_every_one_verifies() -> None:
    old, new = ControlKeys.parse(OTHER), ControlKeys.parse(f"{KEY},{OTHER}")
    assert old is not None and new is not None
    by_old = json.loads(sign(intervention("r1"), old))
    assert new.verify(by_old)  # a reader given the new key first still reads the old
    by_new = json.loads(sign(intervention("r1"), new))
    assert not old.verify(by_new) and KEYS is not None and KEYS.verify(by_new)


def test_no_keys_is_signing_off_and_short_keys_are_refused() -> None:
    assert ControlKeys.parse("") is None and ControlKeys.parse(" , ") is None
    assert signed(b'{"a":1}', None) == b'{"a":1}'
    with pytest.raises(ControlKeyError, match="key 2 is shorter than 32 characters"):
        ControlKeys.parse(f"{KEY},change-me")


def test_the_reader_acts_only_on_signed_interventions(reader: InterventionReader) -> None:
    req, _ = recorder(reader)
    key = req.request_id.encode()
    forged = intervention(req.request_id)  # what any producer on the topic could write
    reader._take(key, forged)
    reader._take(key, sign(intervention(req.request_id), ControlKeys.parse(OTHER)))
    tampered = json.loads(sign(intervention(req.request_id, action="steer")))
    tampered["action"] = "stop"
    reader._take(key, json.dumps(tampered).encode())
    assert not req.should_stop() and req.interventions == [] and reader.rejected == 3
    reader._take(key, sign(intervention(req.request_id)))
    assert req.should_stop() and reader.delivered == 1


def test_a_signed_intervention_from_an_earlier_run_is_a_replay(reader: InterventionReader) -> None:
    req, _ = recorder(reader)
    earlier = sign(intervention(req.request_id, ts=time.time() - 3600))
    reader._take(req.request_id.encode(), earlier)
    assert not req.should_stop() and reader.rejected == 1


def test_a_signed_intervention_moved_to_another_request_is_refused(
    reader: InterventionReader,
) -> None:
    victim, _ = recorder(reader)
    theirs = json.loads(sign(intervention("attacker-run")))
    theirs["request_id"] = victim.request_id
    reader._take(victim.request_id.encode(), json.dumps(theirs).encode())
    assert not victim.should_stop() and reader.rejected == 1


def decision(rid: str) -> bytes:
    return json.dumps(
        {
            "type": "early_stop",
            "decision_id": f"{rid}-stop",
            "request_id": rid,
            "iteration": 3,
            "action": "stop",
            "reason": "conclusion",
            "evidence": "The hypothesis holds.",
            "ts": time.time(),
        }
    ).encode()


def test_an_early_stop_check_takes_only_a_signed_decision_for_its_request() -> None:
    assert _read(decision("r1"), "r1", KEYS) == (None, False)  # unsigned
    assert _read(sign(decision("r2")), "r1", KEYS) == (None, False)  # another request's
    assert _read(b"{not json", "r1", KEYS) == (None, False)
    found, trusted = _read(sign(decision("r1")), "r1", KEYS)
    assert trusted and found is not None and found.action == "stop"
    found, trusted = _read(decision("r1"), "r1", None)  # no keys: as before
    assert trusted and found is not None
    assert _read(None, "r1", KEYS) == (None, True)  # nothing decided


async def test_the_worker_signs_what_it_tells_agents_and_the_client_takes_it() -> None:
    w = memory_worker(control_keys=f"{KEY},{OTHER}")
    await w.event(handlers.iteration(1, "working on it"))
    await w.event(handlers.iteration(2, "<Conclusion>The answer is 42.</Conclusion>"))
    (sent,) = w.channel("control").sent
    stored = w.lookup.data[REDIS_CONTROL_KEY.format(request_id=handlers.RID)].encode()
    assert sent.value == stored
    found, trusted = _read(stored, handlers.RID, KEYS)
    assert trusted and found is not None and found.action == "stop"
    assert not ControlKeys.parse(OTHER).verify(json.loads(stored))  # type: ignore[union-attr]

    loops = memory_worker(control_keys=KEY)
    loops.clock.now = time.time()  # the intervention's time: after the run began
    reader = InterventionReader(dead_address(), "t.control", {}, warn_interval_s=3600, keys=KEYS)
    try:
        req, _ = recorder(reader)
        await loops.event({**looping.start(), "request_id": req.request_id})
        for i in range(1, 4):
            call = looping.call(i, "BUILD FAILURE", ok=False)
            await loops.event({**call, "request_id": req.request_id})
        (told,) = loops.channel("control").sent  # a loop's first crossing: a signed steer
        reader._take(told.key, told.value)
        assert [i.action for i in req.interventions] == ["steer"] and reader.rejected == 0
    finally:
        reader.close()


async def test_without_keys_the_worker_signs_nothing() -> None:
    w = memory_worker()
    await w.event(handlers.iteration(1, "working on it"))
    await w.event(handlers.iteration(2, "<Conclusion>The answer is 42.</Conclusion>"))
    (decision,) = w.channel("control").values()
    assert decision.get(SIGNATURE) is None


SOURCE_KEY = "ci-" + "0123456789abcdef" * 3


def outcome(rid: str, source: str = "test", key: str | None = SOURCE_KEY, **given: Any) -> bytes:
    event = outcome_event(rid, ok=True, source=source, key=key)
    return json.dumps({**event, **given}).encode()


async def test_outcomes_are_taken_only_from_named_sources_with_their_key() -> None:
    w = memory_worker(outcome_keys=f"test:{SOURCE_KEY},human:{OTHER}")
    await w.event(json.loads(outcome("r1")))  # signed by its source: taken
    assert w.ctx.metrics.counts["outcomes_received"] == 1
    forged = [
        outcome("r2", key=None),  # unsigned
        outcome("r3", source="human"),  # signed with another source's key
        outcome("r4", source="reward", key=SOURCE_KEY),  # a source nobody named
        outcome("r5", ok=False),  # altered after signing
    ]
    for value in forged:
        await w.event(json.loads(value))
    assert w.ctx.metrics.counts["outcomes_received"] == 1
    assert w.ctx.metrics.counts["outcomes_rejected"] == 4


async def test_without_outcome_keys_every_outcome_is_taken() -> None:
    w = memory_worker()
    await w.event(json.loads(outcome("r1", key=None)))
    assert w.ctx.metrics.counts["outcomes_received"] == 1


def test_outcome_keys_name_their_source_and_are_long_enough() -> None:
    assert OutcomeKeys.parse("") is None
    with pytest.raises(ControlKeyError, match="source:key"):
        OutcomeKeys.parse(SOURCE_KEY)
    with pytest.raises(ControlKeyError, match="'test' is shorter than 32"):
        OutcomeKeys.parse("test:short")
