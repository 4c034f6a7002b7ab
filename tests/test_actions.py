"""The chain of a reflected request and the effect of the reflection: a follow-up's
evaluation names its origin's verdict, and each follow-up is counted once (memory worker and
memory store: no Kafka, no Redis; the store on Redis: tests/integration/test_actions.py)."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.memory import MemoryWorker, memory_worker
from tracejudge.judges.agreement.action_effects import ActionFigures, ActionTally, asked, followed
from tracejudge.judges.agreement.tally import Kept, View
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.judges.verdict.make import Closing, Judging, make_verdict
from tracejudge.models.agents import NO_AGENT
from tracejudge.models.outputs import Evaluation
from tracejudge.settings import Settings
from tracejudge.streams.agreement.actions import actions_json
from tracejudge.streams.agreement.live import LiveAgreement
from tracejudge.streams.agreement.store import MemoryAgreementStore
from tracejudge.streams.demo.samples import sample_traces
from tracejudge.streams.kafka.status import Status, render_status
from tracejudge.streams.shared.metrics import Metrics

PARENT = "run:booked-unconfirmed"


def follow_up(parent: str, round_: int, complete: bool, rid: str) -> list[dict[str, Any]]:
    """A run that follows `parent` up: the sample booking, complete or not."""
    trace = sample_traces("run", round_)[0 if complete else 1]
    events: list[dict[str, Any]] = json.loads(
        json.dumps(trace.events).replace(trace.request_id, rid)
    )
    events[0]["parent_request_id"] = parent
    return events


async def run(w: MemoryWorker, events: list[dict[str, Any]]) -> Evaluation:
    for event in events:
        await w.event(event)
    return Evaluation.model_validate(w.channel("evaluations").values()[-1])


async def test_a_follow_up_names_its_origin_and_round_and_ends_the_chain() -> None:
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    parent = await run(w, sample_traces("run")[1].events)
    assert parent.incomplete and parent.origin is None and parent.chain_final is False
    (reflection,) = w.channel("reflections").values()
    assert reflection["request_id"] == PARENT and reflection["reflection_round"] == 1

    w.clock.now += 60
    child = await run(w, follow_up(PARENT, 1, complete=True, rid="run:booked-r1"))
    assert child.reflection_round == 1 and child.chain_final is True
    assert child.origin is not None and child.origin.model_dump() == {
        "request_id": PARENT,
        "root_request_id": PARENT,
        "found": True,
        "reflection_round": 0,
        "overall_score": parent.overall_score,
        "success": parent.success,
        "incomplete": True,
        "verdict_ts": round(parent.ts),
    }
    assert len(w.channel("reflections").values()) == 1  # complete: none for the follow-up
    assert store.kept["run:booked-r1"].root == PARENT  # a round 2 would name the same root

    (figures,) = (await store.action_tally()).figures().items()
    assert figures == (
        (parent.agent_name or NO_AGENT, "reflection_1"),
        ActionFigures(
            asked=1,
            followed_up=1,
            late=0,
            success=1,
            complete=1,
            fixed=1,
            mean_score_change=child.overall_score - parent.overall_score,
            mean_seconds=60.0,
        ),
    )


async def test_a_second_round_names_the_chains_first_request() -> None:
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    await run(w, sample_traces("run")[1].events)
    first = await run(w, follow_up(PARENT, 1, complete=False, rid="run:r1"))
    assert first.chain_final is False  # still incomplete, round 1 of 2: asked again
    second = await run(w, follow_up("run:r1", 2, complete=False, rid="run:r2"))
    assert second.origin is not None
    assert (second.origin.request_id, second.origin.root_request_id) == ("run:r1", PARENT)
    assert second.origin.reflection_round == 1
    assert second.chain_final is True  # the rounds' bound (2) reached: reflection_exhausted
    alerts = [a["kind"] for a in w.channel("alerts").values()]
    assert "reflection_exhausted" in alerts
    figures = (await store.action_tally()).figures()
    by_action = {action: f for (_, action), f in figures.items()}
    assert by_action["reflection_1"].asked == 1 and by_action["reflection_1"].followed_up == 1
    assert by_action["reflection_2"].asked == 1 and by_action["reflection_2"].followed_up == 1
    assert by_action["reflection_2"].complete == 0 and by_action["reflection_2"].fixed == 0


async def test_a_follow_up_published_again_is_counted_once() -> None:
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    await run(w, sample_traces("run")[1].events)
    judging = Judging(tool_call_budget=20, policy=Policy(), version="v-test", llm=None)
    records = [json.dumps(e).encode() for e in follow_up(PARENT, 1, True, "run:r1")]
    made = make_verdict(
        judging, Closing("run:r1", "final_response", records, 5, 0, [], 1_100.0, None)
    )
    for _ in range(3):  # a crash before the input record's commit publishes it again
        await w.ctx.publisher.publish(made)
    (f,) = (await store.action_tally()).figures().values()
    assert (f.asked, f.followed_up, f.fixed) == (1, 1, 1)
    assert len(w.channel("evaluations").values()) == 4  # the parent's, and three of the same
    assert {e["origin"]["found"] for e in w.channel("evaluations").values()[1:]} == {True}


async def test_without_the_parents_verdict_the_origin_says_not_found_and_nothing_counts() -> None:
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    child = await run(w, follow_up("never-seen", 1, complete=True, rid="run:r1"))
    assert child.origin is not None and not child.origin.found
    assert child.origin.request_id == child.origin.root_request_id == "never-seen"
    assert (await store.action_tally()).counts == {}
    # no Redis at all: the same evaluation, nothing looked up
    bare = await run(memory_worker(), follow_up("never-seen", 1, complete=True, rid="run:r2"))
    assert bare.origin == child.origin


def kept(score: int, success: bool, incomplete: bool, ts: float, round_: int = 0) -> Kept:
    view = View(score, score < 60, score < 60 or not success or incomplete)
    return Kept("bot", None, 60, view, None, None, (), None, ts, score, success, incomplete, round_)


def test_a_late_follow_up_counts_as_late_only() -> None:
    origin = kept(50, True, True, 1_000.0)
    tally = ActionTally()
    tally.add(asked(origin, "reflection_1"))
    tally.add(followed(origin, kept(90, True, False, 1_000.0 + 3601, 1), window_s=3600))
    tally.add(asked(origin, "reflection_1"))
    tally.add(followed(origin, kept(40, False, True, 1_000.0 + 30, 1), window_s=3600))
    (f,) = tally.figures().values()
    assert (f.asked, f.followed_up, f.late, f.success, f.complete, f.fixed) == (2, 1, 1, 0, 0, 0)
    assert (f.mean_score_change, f.mean_seconds, f.followed_up_share) == (-10.0, 30.0, 0.5)


def test_a_kept_record_carries_the_chain_and_reads_an_older_one() -> None:
    k = kept(73, False, True, 1_234.0, round_=2)
    k = Kept(**{**k.__dict__, "root": "first-request"})
    assert Kept.decode(k.encode()) == k
    older = json.dumps(json.loads(k.encode())[:10])  # kept by an older worker, without the chain
    back = Kept.decode(older)
    assert (back.score, back.success, back.incomplete, back.round, back.root) == (
        None,
        None,
        None,
        0,
        None,
    )
    assert len(k.encode()) < 128


def test_a_follow_ups_verdict_names_its_parent() -> None:
    judging = Judging(tool_call_budget=20, policy=Policy(), version="v-test", llm=None)
    records = [json.dumps(e).encode() for e in follow_up("p", 1, True, "c")]
    made = make_verdict(judging, Closing("c", "final_response", records, 5, 0, [], 1.0, None))
    assert made.parent == "p" and made.origin is None  # looked up when published


async def test_metrics_and_status_show_the_action_figures() -> None:
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    parent = await run(w, sample_traces("run")[1].events)
    w.clock.now += 60
    child = await run(w, follow_up(PARENT, 1, complete=True, rid="run:r1"))
    metrics = Metrics()
    live = LiveAgreement(store)  # type: ignore[arg-type]
    metrics.readings.agreement = live.metrics
    await live.refresh()
    samples = {
        (s.name, s.labels["agent"], s.labels["action"]): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        if family.name.startswith("tracejudge_action_")
        for s in family.samples
    }
    agent = parent.agent_name or NO_AGENT
    assert samples[("tracejudge_action_asked", agent, "reflection_1")] == 1
    assert samples[("tracejudge_action_fixed", agent, "reflection_1")] == 1
    assert samples[("tracejudge_action_seconds_mean", agent, "reflection_1")] == 60
    change = child.overall_score - parent.overall_score
    assert samples[("tracejudge_action_score_change_mean", agent, "reflection_1")] == change

    settings = Settings(redis_url="").masked()
    status = Status(settings, [], [], {}, None, actions_json(await store.action_tally()))
    text = render_status(status)
    assert "    reflection_1: asked 1, followed up 1 (late 0), complete 1, fixed 1" in text
    assert "no reflection requested yet" in render_status(Status(settings, [], [], {}, None, {}))


# -- early stops and generic retries ----------------------------------------------------------


def loop(rid: str, rounds: int, conclude_at: int | None, limit: int = 10) -> list[dict[str, Any]]:
    """An iterative workflow's events: `rounds` rounds, a conclusion in round `conclude_at`."""
    events: list[dict[str, Any]] = [
        {
            "type": "task_started",
            "request_id": rid,
            "goal": "find the cause",
            "step_index": 0,
            "agent_name": "looper",
        }
    ]
    for i in range(1, rounds + 1):
        said = (
            "<Conclusion>the index is missing</Conclusion>" if i == conclude_at else "still at it"
        )
        events.append(
            {
                "type": "iteration",
                "request_id": rid,
                "step_index": i,
                "iteration": i,
                "max_iterations": limit,
                "response": said,
                "agent_name": "looper",
            }
        )
    events.append(
        {
            "type": "final_response",
            "request_id": rid,
            "step_index": rounds + 1,
            "output": "Add the missing index on orders.customer_id.",
            "agent_name": "looper",
        }
    )
    return events


async def test_early_stops_count_the_rounds_saved_beside_the_loops_that_ran_to_the_end() -> None:
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    stopped = await run(w, loop("stopped", rounds=3, conclude_at=3))
    assert stopped.stopped_early is True and stopped.early_stop_decided is True
    ignored = await run(w, loop("ignored", rounds=10, conclude_at=4))  # told, ran on anyway
    assert ignored.stopped_early is False and ignored.early_stop_decided is True
    plain = [await run(w, loop(f"plain-{n}", rounds=10, conclude_at=None)) for n in range(2)]
    assert all(e.early_stop_decided is False for e in plain)
    again = memory_worker(agreement=store)  # the same verdict published again: counted once
    await run(again, loop("stopped", rounds=3, conclude_at=3))

    figures = (await store.action_tally()).figures()
    early = figures[("looper", "early_stop")]
    assert (early.asked, early.followed_up, early.rounds_saved) == (2, 1, 7)
    assert (early.success, early.complete) == (int(stopped.success), int(not stopped.incomplete))
    assert early.mean_score == stopped.overall_score
    ended = figures[("looper", "ran_to_end")]
    assert ended.runs == 2 and ended.asked == 0
    assert ended.mean_score == sum(e.overall_score for e in plain) / 2
    shown = actions_json(await store.action_tally())["looper"]
    assert shown["early_stop"]["rounds_saved"] == 7 and shown["ran_to_end"]["runs"] == 2


def answer(session: str, attempt: int, text: str) -> dict[str, Any]:
    return {
        "type": "model_response",
        "session_id": session,
        "agent": "chatty",
        "prompt": "What is the refund policy for damaged items?",
        "response": text,
        "attempt": attempt,
    }


async def test_a_generic_answers_retry_counts_asked_answered_and_substantive() -> None:
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store, generic_max_retries=2)
    generic = "I'd be happy to help you with that! Let me know if you have any other questions."
    useful = "Damaged items are refunded in full within 14 days; send a photo with the order id."
    await w.response(answer("s1", 0, generic))
    await w.response(answer("s1", 1, useful))  # the retry's answer: substantive
    await w.response(answer("s1", 1, useful))  # delivered again: the same answer
    await w.response(answer("s2", 0, generic))
    await w.response(answer("s2", 1, generic))  # still generic: asked again, not fixed
    await w.response(answer("s3", 0, useful))  # nothing asked
    asked = [r for r in w.channel("retries").values() if r["type"] == "retry_request"]
    assert len(asked) == 3
    f = (await store.action_tally()).figures()[("chatty", "generic_retry")]
    assert (f.asked, f.followed_up, f.fixed) == (3, 2, 1)
