"""Records written to be unreadable can cost their own record, never the reader or the run:
a signature that is not ASCII or a lone surrogate is a no from verification (it raised, and
the client's reader thread died with every agent's stops); a lone surrogate in a step is
replaced, and the step is judged (it was dead-lettered, hiding a loop)."""

from __future__ import annotations

import asyncio
import json

from aiohttp.test_utils import TestServer

from tracejudge.client.early_stop import _read
from tracejudge.client.interventions import InterventionReader, RequestWatch
from tracejudge.models.events import parse_event
from tracejudge.models.outputs import Intervention
from tracejudge.models.signing import ControlKeys, OutcomeKeys, sign_outcome
from tracejudge.settings import Settings
from tracejudge.streams.explorer.feed import take
from tracejudge.streams.explorer.server import make_app
from tracejudge.streams.explorer.store import VerdictStore
from tracejudge.streams.replay.engine import replay
from tracejudge.streams.shared.visible import visible

KEY = "k" * 40
KEYS = ControlKeys.parse(KEY)
assert KEYS is not None
RID = "req-1"


def intervention(**fields: object) -> dict[str, object]:
    record = {
        "type": "intervention",
        "intervention_id": "iv-1",
        "request_id": RID,
        "kind": "loop",
        "action": "stop",
        "crossed": "repeated_call",
        "message": "Stop: the same call keeps failing.",
        "evidence": "",
        "ts": 2e9,
        **fields,
    }
    Intervention.model_validate(record)  # of the contract: only the signature is poisoned
    return record


def signed(record: dict[str, object]) -> bytes:
    assert KEYS is not None
    return KEYS.sign(json.dumps(record).encode())


def test_verification_is_only_ever_yes_or_no() -> None:
    assert KEYS is not None
    good = json.loads(signed(intervention()))
    assert KEYS.verify(good)
    for poisoned in (
        {**good, "signature": "hmac-sha256:" + "é" * 64},  # compare_digest raised TypeError
        {**good, "signature": "hmac-sha256:" + "\udcff" * 64},
        {**good, "message": "Stop \udcff"},  # the canonical text's encoding raised
        {**good, "signature": ["hmac-sha256:00"]},
    ):
        assert KEYS.verify(poisoned) is False
    outcomes = OutcomeKeys.parse(f"ci:{KEY}")
    assert outcomes is not None
    outcome = sign_outcome({"type": "outcome", "request_id": RID, "ok": True, "source": "ci"}, KEY)
    assert outcomes.verify(outcome)
    assert outcomes.verify({**outcome, "signature": "hmac-sha256:ü"}) is False
    assert outcomes.verify({**outcome, "note": "\ud800"}) is False


def test_an_early_stop_check_never_raises_into_the_agent() -> None:
    decision = {  # of the contract: only its signature is poisoned
        "type": "early_stop",
        "decision_id": "d1",
        "request_id": RID,
        "iteration": 2,
        "action": "stop",
        "reason": "conclusion",
        "evidence": "",
        "ts": 2e9,
        "signature": "hmac-sha256:" + "ß" * 64,
    }
    assert _read(json.dumps(decision).encode(), RID, KEYS) == (None, False)
    assert _read(b'{"request_id": "\\udcff"}', RID, KEYS) == (None, False)


def test_a_poisoned_record_costs_the_reader_one_record_not_the_next_stop() -> None:
    reader = InterventionReader("127.0.0.1:9", "tracejudge.control", keys=KEYS)
    watch = RequestWatch(RID, since=1e9)
    reader._watched[RID] = watch  # watched, without a broker
    poisoned = {**json.loads(signed(intervention())), "signature": "hmac-sha256:" + "é" * 64}
    reader._take_safely(RID.encode(), json.dumps(poisoned).encode())
    reader._take_safely(RID.encode(), b'{"type": "intervention", "request_id": "\\udcff"}')
    assert watch.stop is None and reader.rejected == 1 and reader.unsigned == 0
    assert reader.unreadable == 1  # the surrogate one: not of the contract, counted
    reader._take_safely(RID.encode(), json.dumps(intervention(intervention_id="iv-0")).encode())
    assert watch.stop is None and reader.rejected == 2 and reader.unsigned == 1
    reader._take_safely(RID.encode(), signed(intervention(intervention_id="iv-2")))
    assert watch.stop is not None and watch.stop.intervention_id == "iv-2"
    reader.close()


def call(i: int) -> bytes:
    # as JSON.stringify writes a lone surrogate: escaped, valid JSON, not valid UTF-16 text
    args = '"args_summary":"{\\"to\\":\\"\\udcff\\"}"'
    return (
        f'{{"type":"tool_call","request_id":"r","step_index":{i},"tool":"transfer",{args},'
        '"success":false,"error":"denied"}'
    ).encode()


def test_a_lone_surrogate_in_a_step_is_replaced_and_the_step_judged() -> None:
    event = parse_event(call(1))
    assert event.type == "tool_call" and event.args_summary == '{"to":"\ufffd"}'
    records = [
        (b"r", b'{"type":"task_started","request_id":"r","goal":"pay","agent_name":"a"}'),
        *[(b"r", call(i)) for i in range(1, 5)],
        (b"r", b'{"type":"final_response","request_id":"r","output":"Done."}'),
    ]
    result = asyncio.run(replay(Settings(redis_url=""), records))
    assert result.dead_letters == 0
    evaluation = result.evaluations["r"]
    rules = {f["rule"] for f in evaluation["findings"]}
    assert "identical_call_loop" in rules and not evaluation["passed"]


async def raw_get(port: int, path: str, authorization: bytes) -> bytes:
    """A request whose Authorization header is not UTF-8, as only a raw socket sends it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + authorization + b"\r\nConnection: close\r\n\r\n"
    )
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


async def test_a_token_that_is_not_utf8_is_refused_not_a_server_error() -> None:
    # imported here, as the names below: each test fails on its own on code without them
    from tracejudge.streams.shared.web_guard import tokens_match

    assert tokens_match("x\udcff", KEY) is False and tokens_match(KEY, KEY)
    settings = Settings.model_validate({"redis_url": "", "ui_token": KEY})
    server = TestServer(make_app(settings, VerdictStore(capacity=10)))
    await server.start_server()
    try:
        answer = await raw_get(server.port or 0, "/", b"\xff\xfe-not-utf-8")
    finally:
        await server.close()
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    assert head.startswith("HTTP/1.1 401") and "X-Content-Type-Options: nosniff" in head


def test_an_evaluation_the_explorer_cannot_read_is_skipped_not_a_restart() -> None:
    store = VerdictStore(capacity=5)
    take(store, "evaluations", b'{"request_id":"r","overall_score":Infinity,"evaluation_id":"e"}')
    assert store.unreadable == 1


def test_the_arabic_letter_mark_is_shown_not_obeyed_on_a_terminal() -> None:
    assert visible("paid\u061c 20 EUR") == "paid\\u061c 20 EUR"


def test_a_decision_older_than_its_run_is_refused() -> None:
    """A signed decision for the same request id, made 30 days before this run began, is an
    earlier run's: refused, as interventions are."""
    assert KEYS is not None
    decision = {
        "type": "early_stop",
        "decision_id": "d1",
        "request_id": RID,
        "iteration": 3,
        "action": "stop",
        "reason": "conclusion",
        "evidence": "the last round said it was done",
        "ts": 1_000.0,
    }
    raw = KEYS.sign(json.dumps(decision).encode())
    fresh = _read(raw, RID, KEYS, since=1_010.0)
    assert fresh[1] and fresh[0] is not None
    assert _read(raw, RID, KEYS, since=1_000.0 + 30 * 86_400) == (None, False)


def test_signed_only_with_no_key_obeys_nothing() -> None:
    """An agent whose key went missing: with TRACEJUDGE_CONTROL_SIGNED_ONLY it acts on no
    control record at all, instead of on any (a forged stop among them)."""
    from tracejudge.models.signing import control_key_set

    unsigned = json.loads(json.dumps(intervention()))
    assert control_key_set(None, {}) is None  # no keys, not signed-only: unchecked, as before
    refusing = control_key_set(None, {"TRACEJUDGE_CONTROL_SIGNED_ONLY": "true"})
    assert refusing is not None and not refusing.verify(unsigned)
    assert not refusing.verify(json.loads(signed(intervention())))


def test_an_outcome_key_rotates_with_both_keys_verifying() -> None:
    new, old = "n" * 40, "o" * 40
    keys = OutcomeKeys.parse(f"ci:{new},ci:{old}")
    assert keys is not None
    event = {"type": "outcome", "request_id": RID, "ok": True, "source": "ci"}
    assert keys.verify(sign_outcome(event, new)) and keys.verify(sign_outcome(event, old))
    assert not keys.verify(sign_outcome(event, "x" * 40))
    assert not keys.verify(sign_outcome({**event, "source": "human"}, new))


def test_a_step_the_worker_cannot_read_shows_in_its_runs_verdict() -> None:
    """Dead-lettered as before, and no longer invisible to the run's verdict: a step in its
    place says it could not be read, and why."""
    records = [
        (b"u", b'{"type":"task_started","request_id":"u","goal":"pay","agent_name":"a"}'),
        (b"u", b'{"type":"tool_call","request_id":"u","step_index":1,"tool":"t","success":true}'),
        # `success` as a string: refused by the contract's strict types
        (b"u", b'{"type":"tool_call","request_id":"u","step_index":2,"tool":"pay","success":"no"}'),
        (b"u", b'{"type":"final_response","request_id":"u","output":"Paid."}'),
    ]
    result = asyncio.run(replay(Settings(redis_url=""), records))
    assert result.dead_letters == 1
    evaluation = result.evaluations["u"]
    assert any("reported an error" in r for r in evaluation["reasons"]), evaluation["reasons"]
    # the same records without the unreadable one: nothing to say (the proof it can fail)
    clean = asyncio.run(
        replay(Settings(redis_url=""), [r for i, r in enumerate(records) if i != 2])
    )
    assert not any("reported an error" in r for r in clean.evaluations["u"]["reasons"])
    assert clean.evaluations["u"]["overall_score"] > evaluation["overall_score"]


def test_a_reader_found_dead_is_started_again_when_the_agent_asks() -> None:
    """Were the reader's thread to end (nothing should end it), the next `should_stop()` of a
    run it watches starts it again: the run is not left unwatched until the next request."""
    from tracejudge.client.events import Recorder

    reader = InterventionReader("127.0.0.1:9", "tracejudge.control", keys=KEYS)
    try:
        req = Recorder(lambda _e: True, "goal", reader=reader)
        assert reader.running
        reader._stopping.set()  # the thread ends, as if it had died
        assert reader._thread is not None
        reader._thread.join(5)
        assert not reader.running and not req.should_stop()
        assert reader.running and reader.restarts == 1
    finally:
        reader.close()
