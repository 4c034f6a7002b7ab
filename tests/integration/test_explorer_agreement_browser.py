"""The explorer's agent page in a real browser (Debian's Chromium, headless) with how the agent's
verdicts agree with their outcomes: verdicts on the real evaluations topic, their `Kept` and
outcomes joined by the real agreement store in the real Redis, and the page's figures checked
against the same pairs counted in memory; a screenshot is saved."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from selenium.webdriver.common.by import By

from tests.integration.browser import browser, explorer, screenshot, wait_until
from tests.integration.harness import WorkerProcess, produce
from tests.test_explorer import judged
from tracejudge.judges.agreement.tally import Figures, Tally, Truth, kept_of
from tracejudge.models.outputs import Evaluation
from tracejudge.settings import Settings
from tracejudge.streams.agreement.live import agreement_store
from tracejudge.streams.agreement.store import MemoryAgreementStore
from tracejudge.streams.explorer.agreement import auc_text, share_text

pytestmark = pytest.mark.integration

RUNS = 60
JUDGED = 12  # the first runs: the LLM judge answered for them too


def evaluations(agent: str) -> list[tuple[dict[str, Any], bool]]:
    """Verdicts made by the rule judge, their scores spread over 0-100, each with an outcome
    that is ok more often the higher its score (deterministic, not a perfect ranking)."""
    now = time.time()
    made = []
    for i in range(RUNS):
        evaluation, _, _ = judged(f"{agent}-{i}", fail=i % 3 == 0, ts=now - RUNS + i)
        score = 5 + (i * 37) % 91
        evaluation.update(
            agent_name=agent,
            agent_version="v1",
            overall_score=score,
            rule_score=score,
            passed=score >= evaluation["warn_threshold"],
        )
        if i < JUDGED:  # the judge kinder to the ok runs than the rules are
            ok_judged = i % 2 == 0
            evaluation.update(judge_status="ok", llm_score=85 if ok_judged else 25)
        made.append((evaluation, (i * 53) % 100 < score))
    for i in range(JUDGED):
        made[i] = (made[i][0], i % 2 == 0)
    return made


async def join(settings: Settings, made: list[tuple[dict[str, Any], bool]]) -> Tally:
    """Each verdict kept and its outcome sent, in the real store of the worker's deployment
    (every other outcome before its verdict: both orders join); returns the same pairs counted
    in memory."""
    client = aioredis.from_url(settings.redis_url)
    live = agreement_store(settings, client)
    assert live is not None
    twin = MemoryAgreementStore()
    try:
        for i, (evaluation, ok) in enumerate(made):
            rid, kept = evaluation["request_id"], kept_of(Evaluation.model_validate(evaluation))
            truth = Truth(ok, "test" if i % 4 else "human")
            for store in (live, twin):
                if i % 2:
                    await store.outcome(rid, truth, time.time())
                    await store.keep(rid, kept)
                else:
                    await store.keep(rid, kept)
                    await store.outcome(rid, truth, time.time())
        await live.aclose()
    finally:
        await client.aclose()
    return await twin.tally()


def row(page: Any, figure: str) -> list[str]:
    cells = page.find_elements(By.CSS_SELECTOR, f'#agreement tr[data-figure="{figure}"] td.num')
    return [c.text for c in cells]


def test_the_agent_page_shows_agreement_and_the_reliability_plot(
    pipeline_worker: WorkerProcess,
) -> None:
    agent = f"agreement-{uuid.uuid4().hex[:6]}"
    made = evaluations(agent)
    s = pipeline_worker.settings
    messages = [(e["request_id"].encode(), json.dumps(e).encode()) for e, _ in made]
    asyncio.run(produce(s.kafka_bootstrap, pipeline_worker.topic("evaluations"), messages))
    expected = asyncio.run(join(s, made))
    final: Figures = expected.figures("final", agent=agent)
    assert final.runs == RUNS and final.auc is not None
    log = pipeline_worker.log.with_name("explorer-agreement.log")
    with explorer(pipeline_worker.env, log) as base, browser() as page:
        address = f"{base}/agents/{urllib.parse.quote(agent)}"

        def shown() -> bool:  # the verdicts read from the topic, the tally from Redis
            page.get(address)
            return bool(page.find_elements(By.ID, "agreement"))

        wait_until(shown, 60, lambda: page.page_source)
        views = page.find_elements(By.CSS_SELECTOR, "#agreement th[data-view]")
        assert [v.get_attribute("data-view") for v in views] == [
            "final",
            "rules",
            "judge",
            "blend",
        ]
        assert row(page, "runs")[0] == f"{RUNS} ({final.ok_runs} ok, {final.failed_runs} failed)"
        assert row(page, "auc")[0] == auc_text(final)
        assert row(page, "ok_alerted")[0] == share_text(final.ok_alerted)
        assert row(page, "failed_flagged")[0] == share_text(final.failed_flagged)
        assert row(page, "alert_precision")[0] == share_text(final.alert_precision)
        for i, view in enumerate(("rules", "judge", "blend"), start=1):
            figures = expected.figures(view, agent=agent, judged=True)
            assert figures.runs == JUDGED
            assert row(page, "auc")[i] == auc_text(figures)
        sources = page.find_element(By.ID, "agreement-sources").text
        assert f"test {RUNS * 3 // 4}, human {RUNS // 4}" in sources

        plot = page.find_element(By.CSS_SELECTOR, "svg.reliability")
        assert plot.size["width"] > 300 and plot.size["height"] > 300  # drawn, not just there
        points = plot.find_elements(By.CSS_SELECTOR, "g.bin")
        want = {b.low: b for b in final.calibration if b.runs}
        assert {int(p.get_attribute("data-low") or -1) for p in points} == set(want)
        for p in points:
            b = want[int(p.get_attribute("data-low") or -1)]
            assert int(p.get_attribute("data-runs") or 0) == b.runs
            assert int(p.get_attribute("data-ok") or 0) == b.ok
            circle = p.find_element(By.TAG_NAME, "circle")
            assert circle.size["width"] > 4  # rendered with its size
        assert plot.find_elements(By.CSS_SELECTOR, "line.diagonal")
        title = plot.find_element(By.TAG_NAME, "title").get_attribute("textContent") or ""
        assert "Reliability" in title
        table = page.find_elements(By.CSS_SELECTOR, "#reliability tbody tr")
        assert len(table) == len(want)
        screenshot(page, "agent-agreement")
