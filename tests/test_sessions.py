"""Conversations judged as conversations, through the worker's own handlers in memory: each
closed request of a session is a turn; the session agent revises the session's verdict at each
turn, makes it final on `session_end` or after the idle time, and revises it again when the
session resumes. Every revision is its own record, on the sessions topic and in Redis."""

from __future__ import annotations

import json
from typing import Any

from tests.memory import MemoryWorker, memory_worker
from tracejudge.models import names
from tracejudge.models.ids import stable_id
from tracejudge.models.sessions import SessionVerdict, session_id
from tracejudge.streams.sessions.scanner import SessionScanner
from tracejudge.streams.sessions.state import MAX_STATE_BYTES

AGENT = "support-bot"
KEY = "chat-42"


def turn(
    rid: str,
    goal: str,
    answer: str | None = "Done: your booking is changed.",
    calls: list[tuple[str, bool]] | None = None,
    session: str = KEY,
    agent: str = AGENT,
) -> list[dict[str, Any]]:
    """One user turn as a request: the user's message, the agent's calls, its answer."""
    common = {"request_id": rid, "session_key": session, "agent_name": agent}
    events: list[dict[str, Any]] = [{**common, "type": "task_started", "goal": goal}]
    for n, (tool, ok) in enumerate(calls or [("get_booking", True)], start=1):
        call = {**common, "type": "tool_call", "step_index": n, "tool": tool, "success": ok}
        if not ok:
            call["error"] = "HTTP 503 from the booking service"
        else:
            call["result_preview"] = '{"status": "ok"}'
        events.append(call)
    if answer is not None:
        last = len(events)
        events.append({**common, "type": "final_response", "step_index": last, "output": answer})
    return events


async def ask(w: MemoryWorker, events: list[dict[str, Any]]) -> None:
    for event in events:
        await w.event(event)
    await w.session_records()


def revisions(w: MemoryWorker) -> list[dict[str, Any]]:
    return w.channel("sessions").values()


def worker(**settings: Any) -> MemoryWorker:
    return memory_worker(**{"session_idle_s": 600, "session_end_grace_s": 30, **settings})


async def test_each_turn_revises_the_session_and_an_end_makes_it_final() -> None:
    w = worker()
    await ask(w, turn("r1", "Change my flight to Friday, booking ABC123."))
    await ask(w, turn("r2", "Also add a checked bag to booking ABC123."))
    first, second = revisions(w)
    assert (first["revision"], first["cause"], first["cause_request_id"]) == (1, "turn", "r1")
    assert (second["revision"], second["cause"], second["final"]) == (2, "turn", False)
    assert [t["request_id"] for t in second["turns"]] == ["r1", "r2"]
    assert second["session_key"] == KEY and second["agent_name"] == AGENT
    # the session's end, keyed by its last request: final at once, the same turns
    await w.event({"type": "session_end", "request_id": "r2", "session_key": KEY,
                   "agent_name": AGENT, "reason": "the user closed the chat"})  # fmt: skip
    await w.session_records()
    ended = revisions(w)[-1]
    assert (ended["revision"], ended["cause"], ended["final"]) == (3, "ended", True)
    assert [t["request_id"] for t in ended["turns"]] == ["r1", "r2"]
    assert "ended: the user closed the chat" in ended["reasons"]
    # every revision kept in Redis under its number, the latest under the session's key
    sid = stable_id("session", session_id(AGENT, KEY))
    for n in (1, 2, 3):
        kept = json.loads(w.lookup.data[names.REDIS_SESSION_REVISION_KEY.format(
            session=sid, revision=n)])  # fmt: skip
        assert kept["revision"] == n
    latest = json.loads(w.lookup.data[names.REDIS_SESSION_KEY.format(session=sid)])
    assert latest["revision"] == 3 and latest["final"]
    # ids are deterministic and distinct per revision
    assert len({r["verdict_id"] for r in revisions(w)}) == 3
    SessionVerdict.model_validate(ended)


async def test_a_session_goes_final_after_the_idle_time_and_resumes_with_a_new_revision() -> None:
    w = worker(session_idle_s=60)
    scanner = SessionScanner(w.ctx.sessions, w.channels.session_turns, w.clock)  # type: ignore[arg-type]
    await ask(w, turn("r1", "What is the baggage allowance on my booking XYZ789?"))
    await scanner.scan()
    assert await w.session_records() == 0  # not idle yet: no mark
    w.clock.now += 61
    await scanner.scan()
    assert await w.session_records() == 1
    idle = revisions(w)[-1]
    assert (idle["revision"], idle["cause"], idle["final"]) == (2, "idle", True)
    # the user comes back: the session resumes, judged with the turn before it
    w.clock.now += 3600
    await ask(w, turn("r2", "And can I bring a second bag on booking XYZ789?"))
    resumed = revisions(w)[-1]
    assert (resumed["revision"], resumed["cause"], resumed["final"]) == (3, "resumed", False)
    assert [t["request_id"] for t in resumed["turns"]] == ["r1", "r2"]
    assert [r["revision"] for r in revisions(w)] == [1, 2, 3]  # nothing overwritten
    # quiet again: final again, a fourth revision
    w.clock.now += 61
    await scanner.scan()
    await w.session_records()
    assert (revisions(w)[-1]["revision"], revisions(w)[-1]["cause"]) == (4, "idle")


async def test_an_end_that_comes_before_its_requests_turn_waits_for_it() -> None:
    w = worker()
    events = turn("r1", "Cancel my reservation QQ1234 please.")
    for event in events:
        await w.event(event)
    await w.event({"type": "session_end", "request_id": "r1", "session_key": KEY,
                   "agent_name": AGENT})  # fmt: skip
    sent = w.channel("session_turns").sent
    assert [json.loads(s.value or b"")["type"] for s in sent] == ["session_turn", "session_mark"]
    sent.reverse()  # the end reaches the session agent first (another partition's turn)
    await w.session_records()
    (only,) = revisions(w)  # the end waited: one revision, with the turn, final
    assert (only["cause"], only["final"], len(only["turns"])) == ("ended", True, 1)


async def test_an_end_whose_request_never_comes_is_final_after_the_grace_time() -> None:
    w = worker(session_end_grace_s=30)
    scanner = SessionScanner(w.ctx.sessions, w.channels.session_turns, w.clock)  # type: ignore[arg-type]
    await ask(w, turn("r1", "Where is my refund for booking RF0001?"))
    # ended naming a request this worker knows but which closes without a session (no turn)
    await w.event({"type": "task_started", "request_id": "r9", "goal": "x", "agent_name": AGENT})
    await w.event({"type": "session_end", "request_id": "r9", "session_key": KEY,
                   "agent_name": AGENT})  # fmt: skip
    await w.session_records()
    assert revisions(w)[-1]["revision"] == 1  # waiting
    w.clock.now += 31
    await scanner.scan()
    await w.session_records()
    last = revisions(w)[-1]
    assert (last["revision"], last["cause"], last["final"]) == (2, "ended", True)


async def test_a_record_delivered_again_makes_no_revision() -> None:
    w = worker()
    await ask(w, turn("r1", "Upgrade my seat on booking UP4242."))
    (record,) = w.channel("session_turns").sent
    w.channel("session_turns").sent.append(record)
    await w.session_records()
    assert len(revisions(w)) == 1


async def test_a_failure_never_made_good_in_a_later_turn_names_its_turn_and_step() -> None:
    w = worker()
    await ask(w, turn("r1", "Book the 9am flight to Denver for tomorrow."))
    await ask(w, turn("r2", "Now refund my old ticket TK7788 to my card.",
                      answer="Your refund is on its way.",
                      calls=[("get_ticket", True), ("refund_ticket", False)]))  # fmt: skip
    await ask(w, turn("r3", "Thanks, and what time does the Denver flight board?"))
    last = revisions(w)[-1]
    assert not last["success"]
    blame = last["blame"]
    assert (blame["turn"], blame["request_id"], blame["step_index"]) == (2, "r2", 2)
    # made good in a later turn: the conversation succeeded
    w2 = worker()
    await ask(w2, turn("r1", "Refund my old ticket TK7788 to my card.",
                       answer="The refund failed, let me retry.",
                       calls=[("refund_ticket", False)]))  # fmt: skip
    retried = [("refund_ticket", True)]
    await ask(w2, turn("r2", "Please try the refund of TK7788 again.",
                       answer="Your refund went through.", calls=retried))  # fmt: skip
    assert revisions(w2)[-1]["success"]


async def test_asking_again_is_seen_and_counted_where_the_first_ask_was_not_done() -> None:
    w = worker()
    ask_once = "Please change the passenger name on booking NM5555 to Maria Lopez."
    await ask(w, turn("r1", ask_once, answer="I could not change it, the service failed.",
                      calls=[("update_passenger", False)]))  # fmt: skip
    await ask(w, turn("r2", "Again: change the passenger name on booking NM5555 to Maria Lopez."))
    last = revisions(w)[-1]
    assert [t["repeats"] for t in last["turns"]] == [None, 1]
    assert any(f["rule"] == "asked_again" for f in last["findings"])


async def test_a_drop_below_the_threshold_alerts_once_per_drop_not_per_turn() -> None:
    w = worker()
    bad = [("update_booking", False), ("update_booking", False)]
    for n in range(1, 4):
        await ask(w, turn(f"r{n}", f"Change booking BK{n}000 to the 6pm flight number {n}.",
                          answer=None, calls=bad))  # fmt: skip
        await w.ctx.events.closer.close(f"r{n}", "idle_timeout")
        await w.session_records()
    alerts = [a for a in w.channel("alerts").values() if a["kind"] == "session_low_score"]
    assert len([r for r in revisions(w) if not r["passed"]]) == 3
    assert len(alerts) == 1 and alerts[0]["session_id"] == KEY


async def test_sessions_are_per_agent_and_requests_without_a_session_cost_no_turn() -> None:
    w = worker()
    await ask(w, turn("a1", "Hello, change my flight LX100.", agent="bot-a"))
    await ask(w, turn("b1", "Hello, change my flight LX100.", agent="bot-b"))
    for event in turn("n1", "No session here."):
        await w.event({k: v for k, v in event.items() if k != "session_key"})
    assert len(w.channel("session_turns").sent) == 2
    assert {(r["agent_name"], r["revision"]) for r in revisions(w)} == {("bot-a", 1), ("bot-b", 1)}
    off = memory_worker(sessions_enabled=False)
    for event in turn("r1", "Change my flight LX100."):
        await off.event(event)
    assert off.channel("session_turns").sent == [] and off.ctx.sessions is None


async def test_a_long_session_stays_a_bounded_record_and_keeps_its_opening_request() -> None:
    w = worker(session_max_turns=5)
    big = "x" * 7_000  # clipped on the way in and again in the turn
    for n in range(40):
        await ask(w, turn(f"r{n}", f"Turn {n}: look up booking LB{n:04d} {big}",
                          answer=f"Here it is. {big}"))  # fmt: skip
    assert w.ctx.sessions is not None
    (state,) = w.ctx.sessions.table.values()
    assert len(state) < MAX_STATE_BYTES
    last = revisions(w)[-1]
    assert last["revision"] == 40 and len(last["turns"]) == 40
    assert last["turns"][0]["request_id"] == "r0"
    assert any("kept only their request and answer" in r for r in last["reasons"])


async def test_bad_session_records_are_dead_lettered_and_the_agent_goes_on() -> None:
    w = worker()
    turns = w.channel("session_turns")
    from tests.memory import Sent

    turns.sent.append(Sent(b"k", b"not json", None, {}))
    turns.sent.append(Sent(b"k", json.dumps({"type": "session_turn"}).encode(), None, {}))
    turns.sent.append(Sent(b"k", json.dumps({"type": "other"}).encode(), None, {}))
    await w.session_records()
    assert len(w.channel("dlq").sent) == 3
    await ask(w, turn("r1", "Change my flight LX100 to Monday."))
    assert revisions(w)[-1]["revision"] == 1
    # a session_end without its key is refused at the door, like any bad event
    await w.event({"type": "session_end", "request_id": "r2"})
    assert len(w.channel("dlq").sent) == 4


async def test_a_hand_off_is_named_in_the_session_verdict() -> None:
    w = worker()
    await ask(w, turn("r1", "I want to speak to a person about booking HO1234.",
                      answer="I am transferring you to a colleague.",
                      calls=[("transfer_to_human_agents", True)]))  # fmt: skip
    (verdict,) = revisions(w)
    assert any(f["rule"] == "handed_off" for f in verdict["findings"])


async def test_a_turn_asked_before_the_end_but_closed_after_it_is_late_not_a_resumption() -> None:
    w = worker()
    first, second = turn("r1", "Change my flight AB12."), turn("r2", "And add a bag to AB12.")
    for n, event in enumerate(first + second):
        event["ts"] = 5_000.0 + n  # the agent's clock: r1 asked first
    for event in first + second:
        await w.event(event)
    await w.event({"type": "session_end", "request_id": "r2", "session_key": KEY,
                   "agent_name": AGENT, "ts": 5_100.0})  # fmt: skip
    sent = w.channel("session_turns").sent
    r1_turn = sent.pop(0)
    sent.append(r1_turn)  # r1's partition is slower: its turn comes after the end
    await w.session_records()
    causes = [(r["revision"], r["cause"], r["final"], len(r["turns"])) for r in revisions(w)]
    assert causes == [(1, "turn", False, 1), (2, "ended", True, 1), (3, "ended", True, 2)]
    assert [t["request_id"] for t in revisions(w)[-1]["turns"]] == ["r1", "r2"]


async def test_an_outcome_about_a_session_meets_its_final_verdict_under_the_agents_sessions() -> (
    None
):
    from tracejudge.client.events import outcome_event
    from tracejudge.models.sessions import session_ref
    from tracejudge.streams.agreement.store import MemoryAgreementStore

    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    await ask(w, turn("r1", "Change my flight AB12 to Friday."))
    await w.event({"type": "session_end", "request_id": "r1", "session_key": KEY,
                   "agent_name": AGENT})  # fmt: skip
    await w.session_records()
    ref = session_ref(AGENT, KEY)
    truth = outcome_event(ref, ok=False, source="human", session=(AGENT, KEY))
    await w.event(truth)
    tally = await store.tally()
    assert f"{AGENT} [sessions]" in tally.agents()
    kept = await store.kept_of(ref)
    assert kept is not None and kept.agent == f"{AGENT} [sessions]"
    # an outcome about a session must name it
    await w.event({**truth, "session_key": None})
    assert w.channel("dlq").sent


async def test_a_teams_session_checks_read_the_whole_conversation(tmp_path: Any) -> None:
    checks = tmp_path / "checks.toml"
    checks.write_text("[default.session]\nmax_calls = {cancel_booking = 1}\n")
    w = worker(checks_file=str(checks), checks="tests.team_checks:one_refund_per_conversation")
    once = [("refund_ticket", True), ("cancel_booking", True)]
    await ask(w, turn("r1", "Refund ticket TK1 and cancel booking B1.", calls=once))
    first = revisions(w)[-1]
    assert first["passed"] and not any(f["rule"].startswith("check:") for f in first["findings"])
    await ask(w, turn("r2", "Refund ticket TK2 and cancel booking B2.", calls=once))
    second = revisions(w)[-1]
    fired = {f["rule"] for f in second["findings"] if f["rule"].startswith("check:")}
    assert fired == {"check:max_calls", "check:tests.team_checks:one_refund_per_conversation"}
    assert not second["passed"]
    # the requests alone break neither: their own verdicts have no session check's finding
    for e in w.channel("evaluations").values():
        assert not any(f["rule"].startswith("check:") for f in e["findings"]), e["findings"]
    (refunds,) = [f for f in second["findings"] if f["rule"].endswith("per_conversation")]
    assert refunds["evidence"] == "turn 2: 2 refunds in one conversation" and refunds["step"] == 1


async def test_the_llm_judge_reads_each_new_turn_with_its_summary_of_the_conversation() -> None:
    from tests.fake_llm import FakeLLM, tool_call_reply, verdict

    def script(body: dict[str, Any], n: int) -> Any:
        said = json.dumps(body)
        if "conversation between a user and the agent" not in said:  # a request's own judging
            return tool_call_reply(verdict(True, False, score=80))
        return tool_call_reply(
            verdict(False, True, score=30, summary=f"SUMMARY-{n}: the user wants AB12 moved")
        )

    with FakeLLM(script) as fake:
        w = worker(llm_judge_enabled=True, llm_base_url=fake.base_url, llm_sample_rate=0.0,
                   llm_judge_flagged=False)  # fmt: skip
        handler = w.ctx.sessions
        assert handler is not None and handler.reader is not None
        await ask(w, turn("r1", "Move my flight AB12 to Friday."))
        pending = revisions(w)[-1]
        assert (pending["cause"], pending["judge_status"]) == ("turn", "pending")
        await handler.reader.drain()
        await w.session_records()
        judged = revisions(w)[-1]
        assert (judged["revision"], judged["cause"], judged["judge_status"]) == (2, "judged", "ok")
        assert judged["llm_score"] == 30 and judged["incomplete"]  # the judge decides it
        assert judged["overall_exact"] < pending["overall_exact"]
        await ask(w, turn("r2", "Is it done? Move AB12 to Friday please."))
        await handler.reader.drain()
        await w.session_records()
        session_calls = [r for r in fake.requests if "conversation between" in json.dumps(r)]
        assert len(session_calls) == 2
        second = json.dumps(session_calls[1])
        assert "SUMMARY-" in second and "turn 2" in second  # the rolling summary, the new turn
        assert [r["cause"] for r in revisions(w)] == ["turn", "judged", "turn", "judged"]
        await w.ctx.judge_jobs.aclose()  # type: ignore[union-attr]


def test_tail_prints_a_session_verdict_on_one_line() -> None:
    from tracejudge.streams.cli.render import render

    line = render(
        names.SESSIONS,
        json.dumps(
            {
                "session_key": KEY,
                "agent_name": AGENT,
                "revision": 3,
                "cause": "ended",
                "final": True,
                "turns": [{}, {}],
                "overall_exact": 71.5,
                "passed": True,
                "success": True,
                "incomplete": False,
                "summary": "2 turn(s): done",
                "ts": 1_795_000_000.0,
            }
        ).encode(),
        {},
    )
    assert f"session {KEY} ({AGENT}) rev 3 ended final turns=2 score=71.5 PASS" in line


async def test_a_session_left_undone_asks_one_reflection_naming_its_unanswered_request() -> None:
    from tests.fake_llm import FakeLLM, tool_call_reply, verdict

    def script(body: dict[str, Any], n: int) -> Any:  # the conversation is not done
        return tool_call_reply(verdict(False, True, score=35, summary="refund still owed"))

    with FakeLLM(script) as fake:
        w = worker(llm_judge_enabled=True, llm_base_url=fake.base_url, llm_sample_rate=0.0,
                   llm_judge_flagged=False)  # fmt: skip
        assert w.ctx.sessions is not None and w.ctx.sessions.reader is not None
        # the turn looks done on its own (no reflection of its own): the judge reads more
        await ask(w, turn("r1", "Cancel booking CX900, then refund it to my card.",
                          answer="Your booking CX900 is cancelled.",
                          calls=[("cancel_booking", True)]))  # fmt: skip
        await w.ctx.sessions.reader.drain()
        await w.session_records()
        assert w.channel("reflections").sent == []
        await w.event({"type": "session_end", "request_id": "r1", "session_key": KEY,
                       "agent_name": AGENT})  # fmt: skip
        await w.session_records()
        final = revisions(w)[-1]
        assert (final["cause"], final["final"], final["incomplete"]) == ("ended", True, True)
        (asked,) = w.channel("reflections").values()
        assert (asked["request_id"], asked["session_key"]) == ("r1", KEY)
        assert final["unanswered_request_id"] == "r1"
        # a late turn revises the final verdict: no second reflection
        late = turn("r0", "Also, what is my seat?")
        for event in late:
            event["ts"] = 1.0  # asked long before the end
        await ask(w, late)
        await w.ctx.sessions.reader.drain()
        await w.session_records()
        assert revisions(w)[-1]["final"] and len(w.channel("reflections").sent) == 1
        await w.ctx.judge_jobs.aclose()  # type: ignore[union-attr]


async def test_no_agent_name_or_session_key_makes_another_agents_session() -> None:
    w = worker()
    # the same characters split differently between name and key: two sessions, not one
    await ask(w, turn("a1", "Change my flight LX100.", agent="bot\x1fa", session="k"))
    await ask(w, turn("b1", "Change my flight LX100.", agent="bot", session="a\x1fk"))
    assert [r["revision"] for r in revisions(w)] == [1, 1]
    hostile = '"],["x'  # JSON in a name is a name
    await ask(w, turn("c1", "Change my flight LX100.", agent=hostile, session="<b>k</b>"))
    assert revisions(w)[-1]["agent_name"] == hostile and revisions(w)[-1]["revision"] == 1


async def test_a_session_outcome_is_taken_only_as_its_source_signed_it() -> None:
    from tracejudge.client.events import outcome_event
    from tracejudge.models.sessions import session_ref

    key = "ci-" + "0123456789abcdef" * 3
    w = memory_worker(outcome_keys=f"test:{key}")
    ref = session_ref(AGENT, KEY)
    signed = outcome_event(ref, ok=True, source="test", key=key, session=(AGENT, KEY))
    await w.event(signed)
    assert w.ctx.metrics.counts["outcomes_received"] == 1
    forged = [
        {**signed, "session_key": "another-chat"},  # moved to another session
        {**signed, "subject": "request"},  # made a request's
        {**signed, "signature": "hmac-sha256:" + "é" * 64},  # not even ASCII
        {**signed, "signature": "\ud800"},
    ]
    for value in forged:
        await w.event(value)
    assert w.ctx.metrics.counts["outcomes_received"] == 1
    assert w.ctx.metrics.counts["outcomes_rejected"] == 4


async def test_a_session_check_that_spins_or_talks_nonsense_costs_its_limit_and_no_verdict() -> (
    None
):
    import time

    team = "tests.team_checks"
    checks = (
        f"{team}:spins_on_the_conversation,{team}:says_nonsense,{team}:one_refund_per_conversation"
    )
    w = worker(checks=checks, check_timeout_s=0.5)
    started = time.monotonic()
    await ask(w, turn("r1", "Refund TK1.", calls=[("refund_ticket", True)]))
    await ask(w, turn("r2", "Refund TK2.", calls=[("refund_ticket", True)]))
    assert time.monotonic() - started < 4.0  # two revisions at the limit, not a minute
    last = revisions(w)[-1]
    assert any(f"{team}:spins_on_the_conversation timed out" in r for r in last["reasons"])
    assert any(f"{team}:says_nonsense raised" in r for r in last["reasons"])
    # the check that answered still decides
    assert any(f["rule"].endswith("one_refund_per_conversation") for f in last["findings"])
    assert not last["passed"]
    runner = w.ctx.events.closer.check_runner
    assert runner is not None
    runner.close()


async def test_a_request_of_12000_steps_is_a_bounded_turn() -> None:
    w = worker()
    calls = [(f"read_{n % 7}", n % 25 != 0) for n in range(12_000)]
    await ask(w, turn("r1", "Audit every file of the repository.", calls=calls))
    (sent,) = w.channel("session_turns").sent
    assert len(sent.value or b"") < 100_000  # far under the broker's 1 MiB
    kept = json.loads(sent.value or b"")
    assert len(kept["events"]) <= 2 + 80 and kept["steps_left_out"] >= 11_900
    (verdict,) = revisions(w)
    assert any("left out of the conversation's reading" in r for r in verdict["reasons"])


async def test_a_calibrated_threshold_of_the_agents_sessions_is_what_its_sessions_meet() -> None:
    from tracejudge.judges.agreement.calibration import Calibration

    w = worker(calibration_enabled=True)
    learned = Calibration.of(f"{AGENT} [sessions]", 97, 0.9, 40, 40, 1000.0)
    requests_own = Calibration.of(AGENT, 11, 0.9, 40, 40, 1000.0)
    w.ctx.calibration_book.replace([learned, requests_own])
    await ask(w, turn("r1", "Change my flight AB12 to Friday."))
    (verdict,) = revisions(w)
    assert verdict["warn_threshold"] == 97 and not verdict["passed"]  # not the requests' 11
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["warn_threshold"] == 11
