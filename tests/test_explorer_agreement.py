"""The explorer's agent page with how the agent's verdicts agree with their outcomes: figures per
verdict source, the reliability plot, and a page that never waits long on the store."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tracejudge.judges.agreement.tally import Kept, Tally, Truth, View, cells, wilson
from tracejudge.settings import Settings
from tracejudge.streams.explorer.agreement import AgreementReader, agreement_of
from tracejudge.streams.explorer.reliability import LEFT, RIGHT, SIZE, TOP
from tracejudge.streams.explorer.server import make_app
from tracejudge.streams.explorer.store import VerdictStore

AGENT = "support"


def rules_only(score: int, alerted: bool, flagged: bool) -> Kept:
    return Kept(AGENT, "v1", 60, View(score, alerted, flagged))


def judged(rules: int, judge: int, blend: int) -> Kept:
    def v(score: int) -> View:
        return View(score, score < 60, score < 60)

    return Kept(AGENT, "v1", 60, v(rules), judge=v(judge), blend=v(blend))


def known_tally() -> Tally:
    """16 runs of `support` with outcomes (12 judged by the rules alone, 4 by the LLM judge
    too), and one of another agent, which the page leaves out.

    Final verdicts: ok runs score 95 x6, 30 x1, 80 x2; failed ones 95 x2, 30 x3, 45 x2.
    AUC = (6 x 6 + 1 x 1.5 + 2 x 5) / (9 x 7) = 47.5 / 63; ok alerted 1 of 9; failed flagged
    7 of 7; alert precision 5 of 6."""
    tally = Tally()
    pairs = [
        (rules_only(95, False, False), True, 6),
        (rules_only(95, False, True), False, 2),  # passed, yet not a success: flagged
        (rules_only(30, True, True), False, 3),
        (rules_only(30, True, True), True, 1),
    ]
    for kept, ok, times in pairs:
        tally.add(cells(kept, Truth(ok, "test")), times)
    tally.add(cells(judged(70, 20, 45), Truth(False, "human")), 2)
    tally.add(cells(judged(70, 90, 80), Truth(True, "human")), 2)
    other = Kept("other", None, 60, View(10, True, True))
    tally.add(cells(other, Truth(True, "test")), 50)
    return tally


def store_with_verdicts(agent: str = AGENT) -> VerdictStore:
    store = VerdictStore(capacity=100)
    for i in range(3):
        store.add_evaluation(
            {
                "request_id": f"r{i}",
                "agent_name": agent,
                "ts": 1e9 + i,
                "overall_score": 80,
                "passed": True,
                "success": True,
            }
        )
    return store


async def client_for(
    reader: AgreementReader | None, store: VerdictStore | None = None, **given: Any
) -> TestClient[Any, Any]:
    settings = Settings.model_validate({"redis_url": "", **given})
    app = make_app(settings, store or store_with_verdicts(), reader)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


def read_of(tally: Tally) -> Any:
    async def read() -> Tally:
        return tally

    return read


def cells_of_row(page: str, figure: str) -> list[str]:
    row = re.search(rf'<tr data-figure="{figure}">(.*?)</tr>', page, re.S)
    assert row is not None, figure
    return re.findall(r'<td class="num">(.*?)</td>', row.group(1))


async def test_the_agent_page_shows_each_views_figures_with_counts_and_intervals() -> None:
    client = await client_for(AgreementReader(read_of(known_tally())))
    try:
        page = await (await client.get(f"/agents/{AGENT}")).text()
    finally:
        await client.close()
    views = re.findall(r'<th class="num" data-view="(\w+)">', page)
    assert views == ["final", "rules", "judge", "blend"]  # rules vs judge vs blend: judged runs
    assert cells_of_row(page, "runs") == [
        "16 (9 ok, 7 failed)",
        "4 (2 ok, 2 failed)",
        "4 (2 ok, 2 failed)",
        "4 (2 ok, 2 failed)",
    ]
    auc = cells_of_row(page, "auc")
    assert auc[0].startswith(f"{47.5 / 63:.2f} [") and auc[0].endswith("(9 ok × 7 failed)")
    assert auc[1].startswith("0.50 [") and auc[2].startswith("1.00 [")  # rules tie, judge sorts
    low, high = wilson(1, 9)  # type: ignore[misc]
    assert cells_of_row(page, "ok_alerted")[0] == (
        f"11% (1 of 9) [{100 * low:.0f}–{100 * high:.0f}%]"
    )
    assert cells_of_row(page, "failed_flagged")[0].startswith("100% (7 of 7) [")
    assert cells_of_row(page, "alert_precision")[0].startswith("83% (5 of 6) [")
    assert cells_of_row(page, "alert_precision")[1] == "— (none to count)"  # rules: no alert
    sources = re.search(r'id="agreement-sources">(.*?)</p>', page, re.S)
    assert sources is not None and "by source: test 12, human 4." in sources.group(1)
    assert "at most every 30 s" in sources.group(1)
    assert "other" not in re.sub(r"<svg.*?</svg>", "", page, flags=re.S).split("<h2")[2]


async def test_the_reliability_plot_puts_each_bins_ok_share_at_its_mean_score() -> None:
    found = agreement_of(known_tally(), AGENT)
    assert found is not None
    svg = found.plot
    assert svg.startswith('<svg class="reliability" role="img"')
    assert '<title id="reliability-title">' in svg and '<desc id="reliability-desc">' in svg
    inner = SIZE - LEFT - RIGHT
    bins = re.findall(
        r'<g class="bin" data-low="(\d+)" data-high="(\d+)" data-runs="(\d+)" data-ok="(\d+)" '
        r'data-mean="([\d.]+)" data-share="([\d.]+)"><title>(.*?)</title>'
        r'<line class="interval" x1="([\d.]+)" x2="[\d.]+" y1="([\d.]+)" y2="([\d.]+)".*?'
        r'<circle cx="([\d.]+)" cy="([\d.]+)" r="([\d.]+)"',
        svg,
    )
    by_low = {int(b[0]): b for b in bins}
    # (runs, ok, mean score) per bin of the final verdicts: 95 x8, 30 x4, 45 x2, 80 x2
    assert {k: (int(b[2]), int(b[3]), float(b[4])) for k, b in by_low.items()} == {
        90: (8, 6, 95.0),
        30: (4, 1, 30.0),
        40: (2, 0, 45.0),
        80: (2, 2, 80.0),
    }
    for low, (runs, ok, mean) in {90: (8, 6, 95.0), 30: (4, 1, 30.0), 40: (2, 0, 45.0)}.items():
        b = by_low[low]
        assert float(b[10]) == pytest.approx(LEFT + inner * mean / 100, abs=0.06)  # x: mean
        assert float(b[11]) == pytest.approx(TOP + inner * (1 - ok / runs), abs=0.06)  # y: ok
        lo, hi = wilson(ok, runs)  # type: ignore[misc]
        assert float(b[9]) == pytest.approx(TOP + inner * (1 - hi), abs=0.06)  # its interval
        assert float(b[8]) == pytest.approx(TOP + inner * (1 - lo), abs=0.06)
        assert f"{runs} runs, {ok} ok" in b[6]
    assert float(by_low[90][12]) > float(by_low[30][12]) > float(by_low[40][12])  # area: runs
    assert 'class="diagonal"' in svg
    client = await client_for(AgreementReader(read_of(known_tally())))
    try:
        page = await (await client.get(f"/agents/{AGENT}")).text()
    finally:
        await client.close()
    assert svg in page  # the numbers also in a table beside it
    table = re.search(r'<table id="reliability".*?</table>', page, re.S)
    assert table is not None
    rows = re.findall(r'<tr data-low="(\d+)">(.*?)</tr>', table.group(0))
    assert [int(low) for low, _ in rows] == [30, 40, 80, 90]
    assert '<td class="num">8</td><td class="num">6</td>' in rows[-1][1]


async def test_without_redis_or_outcomes_the_page_says_how_to_send_them() -> None:
    client = await client_for(None)  # no TRACEJUDGE_REDIS_URL: no store
    try:
        page = await (await client.get(f"/agents/{AGENT}")).text()
        assert 'id="no-outcomes"' in page and "has no Redis" in page
        assert 'tracer.outcome(request_id, ok=True, source="test")' in page
        assert '<a href="/docs/outcomes.md">docs/outcomes.md</a>' in page
        docs = await client.get("/docs/outcomes.md")
        assert docs.status == 200 and "outcome" in await docs.text()
    finally:
        await client.close()
    client = await client_for(AgreementReader(read_of(known_tally())), store_with_verdicts("new"))
    try:
        page = await (await client.get("/agents/new")).text()  # outcomes, none of its runs
        assert "No outcomes for this agent" in page and 'id="agreement"' not in page
    finally:
        await client.close()


async def test_a_slow_or_failing_store_never_holds_the_page_and_reads_are_spaced() -> None:
    reads: list[float] = []
    gate = asyncio.Event()
    answer: list[Tally | Exception] = [known_tally()]

    async def read() -> Tally:
        reads.append(time.monotonic())
        await gate.wait()
        found = answer[0]
        if isinstance(found, Exception):
            raise found
        return found

    reader = AgreementReader(read, every_s=0.5, wait_s=0.2)
    client = await client_for(reader)
    try:
        started = time.monotonic()
        page = await (await client.get(f"/agents/{AGENT}")).text()
        assert time.monotonic() - started < 2  # the read hangs; the page does not
        assert "Reading the agreement figures" in page
        await client.get(f"/agents/{AGENT}")
        assert len(reads) == 1  # one read under way at a time
        gate.set()
        await asyncio.sleep(0.05)
        page = await (await client.get(f"/agents/{AGENT}")).text()
        assert 'id="agreement"' in page and "the last read failed" not in page
        assert len(reads) == 1  # within every_s: the figures read are served again
        answer[0] = ConnectionError("Redis went away")
        await asyncio.sleep(0.6)
        page = await (await client.get(f"/agents/{AGENT}")).text()
        assert len(reads) == 2
        # the last figures read stay, said to be the last ones
        assert 'id="agreement"' in page and "the last read failed" in page
    finally:
        await client.close()


async def test_the_agent_page_shows_each_team_check_against_the_outcomes() -> None:
    tally = known_tally()
    check = "check:needs_confirmation"
    # the check failed 3 of the failed runs and 1 ok run of `support`
    for ok, times in ((False, 3), (True, 1)):
        kept = Kept(AGENT, "v1", 60, View(30, True, True), findings=(check,))
        tally.add(cells(kept, Truth(ok, "test")), times)
    client = await client_for(AgreementReader(read_of(tally)))
    try:
        page = await (await client.get(f"/agents/{AGENT}")).text()
    finally:
        await client.close()
    row = re.search(rf'<tr data-check="{check}">(.*?)</tr>', page, re.S)
    assert row is not None, page
    figures = dict(re.findall(r'data-figure="(\w+)">([^<]*)<', row.group(1)))
    assert figures["fired"] == "4"
    assert figures["on_ok"].startswith("10% (1 of 10) [")
    assert figures["on_failed"].startswith("30% (3 of 10) [")
    assert figures["precision"].startswith("75% (3 of 4) [")
    bare = await client_for(AgreementReader(read_of(known_tally())))
    try:
        assert 'id="checks"' not in await (await bare.get(f"/agents/{AGENT}")).text()
    finally:
        await bare.close()
