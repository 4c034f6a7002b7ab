"""The explorer's request page with its chain of reflections, and the agent page with the effect
of the actions asked: verdicts made by the real worker code (memory worker, memory
store), held by the explorer's store, served by its app (no broker, no Redis)."""

from __future__ import annotations

import copy
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from tests.memory import memory_worker
from tests.test_actions import PARENT, follow_up, run
from tracejudge.judges.agreement.action_effects import ActionTally, asked, followed, reflection
from tracejudge.judges.agreement.tally import Kept, View
from tracejudge.settings import Settings
from tracejudge.streams.agreement.store import MemoryAgreementStore
from tracejudge.streams.demo.samples import sample_traces
from tracejudge.streams.explorer.agreement import ActionReader, AgreementReader, actions_of
from tracejudge.streams.explorer.chain import MAX_LINKS, chain_of
from tracejudge.streams.explorer.server import make_app
from tracejudge.streams.explorer.store import VerdictStore


async def three_rounds() -> list[dict[str, Any]]:
    """The origin (incomplete), round 1 (still incomplete: asked again), round 2 (complete:
    final), as the worker publishes them."""
    w = memory_worker(agreement=MemoryAgreementStore())
    await run(w, sample_traces("run")[1].events)
    w.clock.now += 30
    await run(w, follow_up(PARENT, 1, complete=False, rid="run:r1"))
    w.clock.now += 30
    await run(w, follow_up("run:r1", 2, complete=True, rid="run:r2"))
    made: list[dict[str, Any]] = w.channel("evaluations").values()
    assert [e["request_id"] for e in made] == [PARENT, "run:r1", "run:r2"]
    assert [e["chain_final"] for e in made] == [False, False, True]
    return made


def read_of(tally: ActionTally) -> Callable[[], Awaitable[ActionTally]]:
    async def read() -> ActionTally:
        return tally

    return read


def store_of(evaluations: list[dict[str, Any]], capacity: int = 100) -> VerdictStore:
    store = VerdictStore(capacity)
    for e in evaluations:
        store.add_evaluation(e)
    return store


async def client_for(
    store: VerdictStore, actions: ActionReader | None = None, **given: Any
) -> TestClient[Any, Any]:
    settings = Settings.model_validate({"redis_url": "", **given})
    app = make_app(settings, store, AgreementReader(None), actions)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


def chain_items(page: str) -> list[tuple[str, str, str]]:
    """(request id, round, classes) of each link of the page's chain."""
    found = re.search(r'<ol class="chain" id="chain">(.*?)</ol>', page, re.S)
    assert found is not None, page
    return [
        (rid, round_, classes)
        for classes, rid, round_ in re.findall(
            r'<li class="link([^"]*)" data-request="([^"]+)" data-round="([^"]*)">', found.group(1)
        )
    ]


async def test_each_request_of_a_chain_shows_the_whole_chain_with_links_and_the_final() -> None:
    made = await three_rounds()
    client = await client_for(store_of(made))
    try:
        for here in (PARENT, "run:r1", "run:r2"):
            page = await (await client.get(f"/requests/{here}")).text()
            items = chain_items(page)
            assert [(rid, round_) for rid, round_, _ in items] == [
                (PARENT, "0"),
                ("run:r1", "1"),
                ("run:r2", "2"),
            ]
            assert [rid for rid, _, c in items if "here" in c] == [here]
            assert [rid for rid, _, c in items if "final" in c] == ["run:r2"]
            for rid in {PARENT, "run:r1", "run:r2"} - {here}:  # every other one a link
                assert f'<a href="/requests/{rid.replace(":", "%3A")}">{rid}</a>' in page
            assert "Final for the chain: round 2 (run:r2)" in page
        first = await (await client.get(f"/requests/{PARENT}")).text()
        scores = re.findall(r"score <b>(\d+)</b>", first)
        assert scores == [str(e["overall_score"]) for e in made]
    finally:
        await client.close()


async def test_a_request_without_a_chain_shows_nothing_new_and_an_open_chain_says_so() -> None:
    made = await three_rounds()
    w = memory_worker()
    lone = await run(w, sample_traces("solo")[0].events)
    client = await client_for(store_of([*made[:2], lone.model_dump(mode="json")]))
    try:
        page = await (await client.get(f"/requests/{lone.request_id}")).text()
        assert 'id="chain-section"' not in page and "Chain of reflections" not in page
        page = await (await client.get("/requests/run:r1")).text()  # round 2 not seen yet
        assert [rid for rid, _, _ in chain_items(page)] == [PARENT, "run:r1"]
        assert 'class="link final"' not in page and "Open: a reflection request went out" in page
    finally:
        await client.close()


async def test_a_parent_no_longer_held_is_shown_from_its_follow_ups_origin() -> None:
    made = await three_rounds()
    # the explorer holds round 2 only (the others past its look-back or evicted)
    client = await client_for(store_of(made[2:]))
    try:
        page = await (await client.get("/requests/run:r2")).text()
    finally:
        await client.close()
    items = chain_items(page)
    # the root by its id, a gap for the rounds not held, the parent as round 2's origin saw it
    assert [(rid, round_) for rid, round_, _ in items] == [
        (PARENT, "0"),
        ("run:r1", "1"),
        ("run:r2", "2"),
    ]
    assert 'class="gap"' in page and "verdict not found" in page  # the root's verdict
    assert f"score <b>{made[1]['overall_score']}</b>" in page  # the parent's, from the origin


def test_the_chain_of_a_looping_or_endless_parent_list_is_cut() -> None:
    def evaluation(rid: str, parent: str, round_: int) -> dict[str, Any]:
        return {
            "request_id": rid,
            "overall_score": 50,
            "reflection_round": round_,
            "chain_final": False,
            "origin": {"request_id": parent, "root_request_id": parent, "found": True},
        }

    looping = store_of([evaluation("a", "b", 1), evaluation("b", "a", 1)])
    found = chain_of(evaluation("a", "b", 1), looping)
    assert found is not None and found.cut
    assert [k.request_id for k in found.links] == ["b", "a"]

    endless = [evaluation(f"r{i}", f"r{i + 1}", 1) for i in range(3 * MAX_LINKS)]
    found = chain_of(endless[0], store_of(endless, capacity=10 * MAX_LINKS))
    assert found is not None and found.cut and len(found.links) <= MAX_LINKS + 2


def test_the_follow_ups_index_is_bounded_with_the_verdicts() -> None:
    store = VerdictStore(capacity=2)
    for i in range(5):
        store.add_evaluation(
            {"request_id": f"c{i}", "overall_score": 1, "ts": i, "origin": {"request_id": "p"}}
        )
    assert [v.request_id for v in store.children("p")] == ["c3", "c4"]
    replaced = {"request_id": "c4", "overall_score": 1, "ts": 5, "origin": {"request_id": "q"}}
    store.add_evaluation(copy.deepcopy(replaced))  # judged again, another parent: moved
    assert [v.request_id for v in store.children("p")] == ["c3"]
    assert [v.request_id for v in store.children("q")] == ["c4"]
    store.add_evaluation({"request_id": "x", "overall_score": 1, "ts": 6})
    store.add_evaluation({"request_id": "y", "overall_score": 1, "ts": 7})
    assert store.children("p") == [] and store.children("q") == []
    assert store._children == {}  # nothing kept for evicted follow-ups


def known_actions(agent: str = "bot") -> ActionTally:
    """bot: round 1 asked 4 times, 3 followed up (2 fixed, 1 still incomplete) and 1 late;
    round 2 asked once, never followed; round 10 asked once. Another agent beside it."""
    tally = ActionTally()

    def kept(score: int, success: bool, incomplete: bool, ts: float, round_: int) -> Kept:
        view = View(score, score < 60, incomplete or not success)
        return Kept(
            agent, None, 60, view, ts=ts, score=score, success=success, incomplete=incomplete,
            round=round_,
        )  # fmt: skip

    origin = kept(40, True, True, 1000.0, 0)
    tally.add(asked(origin, reflection(1)), 4)
    tally.add(followed(origin, kept(90, True, False, 1030.0, 1), 600), 2)
    tally.add(followed(origin, kept(55, True, True, 1090.0, 1), 600))
    tally.add(followed(origin, kept(90, True, False, 9000.0, 1), 600))
    tally.add(asked(origin, reflection(2)))
    tally.add(asked(origin, reflection(10)))
    tally.add(asked(replace(kept(10, False, True, 0.0, 0), agent="other"), reflection(1)), 9)
    return tally


def action_cells(page: str, action: str) -> dict[str, str]:
    row = re.search(rf'<tr data-action="{action}">(.*?)</tr>', page, re.S)
    assert row is not None, action
    return dict(re.findall(r'<td class="num" data-figure="(\w+)">(.*?)</td>', row.group(1)))


async def test_the_agent_page_shows_each_actions_figures_in_round_order() -> None:
    store = store_of([{"request_id": "r", "agent_name": "bot", "overall_score": 40, "ts": 1.0}])
    reader = ActionReader(read_of(known_actions()))
    client = await client_for(store, reader, action_followup_window_s=600)
    try:
        page = await (await client.get("/agents/bot")).text()
    finally:
        await client.close()
    actions = re.findall(r'<tr data-action="(\w+)">', page)
    assert actions == ["reflection_1", "reflection_2", "reflection_10"]  # not "10" before "2"
    assert action_cells(page, "reflection_1") == {
        "asked": "4",
        "followed_up": "3 (75%)",
        "late": "1",
        "success": "3",
        "complete": "2",
        "fixed": "2 (67%)",
        "score_change": f"{(50 + 50 + 15) / 3:+.1f}",
        "seconds": f"{(30 + 30 + 90) / 3:.0f} s",
    }
    assert action_cells(page, "reflection_2")["followed_up"] == "0 (0%)"
    assert action_cells(page, "reflection_2")["score_change"] == "—"
    assert 'data-figure="rounds_saved"' not in page  # no early stop: its columns left out
    assert "within 600 s" in page


async def test_without_redis_or_figures_the_agent_page_says_so_in_one_line() -> None:
    store = store_of([{"request_id": "r", "agent_name": "new", "overall_score": 40, "ts": 1.0}])
    for reader, said in (
        (None, "No action figures: the explorer has no Redis"),
        (ActionReader(read_of(known_actions())), "Nothing asked of this agent yet"),
    ):
        client = await client_for(store, reader)
        try:
            page = await (await client.get("/agents/new")).text()
        finally:
            await client.close()
        line = re.search(r'<p class="empty" id="no-actions">(.*?)</p>', page, re.S)
        assert line is not None and said in line.group(1) and "\n" not in line.group(1)
        assert 'id="actions"' not in page


def test_the_action_table_leaves_other_agents_out() -> None:
    table = actions_of(known_actions(), "other")
    assert table is not None and [a for a, _ in table.rows] == ["reflection_1"]
    assert actions_of(known_actions(), "nobody") is None
