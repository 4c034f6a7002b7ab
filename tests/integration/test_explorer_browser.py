"""The verdict explorer in a real browser (Debian's Chromium, headless) against a real worker,
Kafka and Redis: the verdicts list and its pages, a request's page with its findings marked on
its steps, an agent's page with its plot binned by time and the version change; a screenshot of
each page is saved."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import uuid

import pytest
from selenium.webdriver.common.by import By

from tests.integration.browser import browser, explorer, screenshot, wait_until
from tests.integration.harness import WorkerProcess, produce
from tests.test_explorer import judged
from tracejudge.client import Tracer

pytestmark = pytest.mark.integration


def run_requests(worker: WorkerProcess, agent: str) -> tuple[list[str], list[str]]:
    """Version v1 of the agent fails its refunds; then v2, deployed once v1's verdicts are in
    (as a release follows the traffic before it), makes them. Returns both request lists."""
    s = worker.settings
    requests: dict[str, list[str]] = {"v1": [], "v2": []}
    with Tracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix) as tracer:
        for version in ("v1", "v2"):
            for i in range(4):
                with tracer.traced(
                    f"refund order {i} for jane.doe@example.com",
                    agent_name=agent,
                    agent_version=version,
                ) as req:
                    req.tool_call("get_order", args={"id": i}, success=True, result="found, paid")
                    if version == "v1":
                        req.tool_call(
                            "refund", args={"id": i}, success=False, error="gateway timeout"
                        )
                        req.final(f"I could not refund order {i}.")
                    else:
                        req.tool_call("refund", args={"id": i}, success=True, result="refunded")
                        req.final(f"Refunded order {i}: 20 EUR back to your card.")
                requests[version].append(req.request_id)
            assert tracer.flush(10)
            for rid in requests[version]:
                assert tracer.wait_for_evaluation(rid, timeout=60) is not None, rid
    return requests["v1"], requests["v2"]


HISTORY = 150  # verdicts of two hours: two pages of the list, 5-minute bins on the plot


def write_history(worker: WorkerProcess, agent: str) -> float:
    """Two hours of an agent's verdicts, made by the rule judge as the worker makes them, onto
    the evaluations topic the explorer reads: a worker stamps a verdict with its own clock, so
    verdicts spread over hours come from a past a test cannot wait for. v1 fails every other
    request, v2 (the second hour) none. Returns when v2 began."""
    now = time.time()
    start = now - 2 * 3600
    messages = []
    for i in range(HISTORY):
        ts = start + i * 7200 / HISTORY
        version = "v1" if i < HISTORY // 2 else "v2"
        evaluation, _, _ = judged(f"{agent}-{i}", fail=version == "v1" and i % 2 == 0, ts=ts)
        evaluation.update(agent_name=agent, agent_version=version)
        messages.append((evaluation["request_id"].encode(), json.dumps(evaluation).encode()))
    s = worker.settings
    asyncio.run(produce(s.kafka_bootstrap, worker.topic("evaluations"), messages))
    return start + 3600


def test_the_explorer_shows_verdicts_findings_and_an_agents_plot(
    pipeline_worker: WorkerProcess,
) -> None:
    agent = f"explorer-{uuid.uuid4().hex[:6]}"
    failed, passed = run_requests(pipeline_worker, agent)
    log = pipeline_worker.log.with_name("explorer.log")
    with explorer(pipeline_worker.env, log) as base, browser() as page:
        listing = f"{base}/?agent={urllib.parse.quote(agent)}"

        def listed() -> bool:
            page.get(listing)
            return len(page.find_elements(By.CSS_SELECTOR, "tr.verdict")) == 8

        wait_until(listed, 60, lambda: page.page_source)
        shown = {
            r.get_attribute("data-request")
            for r in page.find_elements(By.CSS_SELECTOR, "tr.verdict")
        }
        assert shown == set(failed + passed)
        screenshot(page, "verdicts")

        page.get(f"{listing}&passed=no")
        assert len(page.find_elements(By.CSS_SELECTOR, "tr.verdict")) == 4

        page.find_element(By.LINK_TEXT, failed[0]).click()
        assert failed[0] in page.find_element(By.TAG_NAME, "h1").text
        findings = page.find_element(By.ID, "findings").text
        assert "unrecovered_failure" in findings
        marked = page.find_elements(By.CSS_SELECTOR, "#timeline tr.marked")
        assert marked and all("refund" in row.text for row in marked)
        assert "failed step" in marked[0].text and "unrecovered_failure" in marked[0].text
        assert "jane.doe@example.com" not in page.page_source  # masked before it was kept
        screenshot(page, "request")

        page.get(f"{base}/agents/{urllib.parse.quote(agent)}")
        # 8 verdicts within seconds: no trend drawn, said why; the change is still compared
        assert "Too few to show a trend" in page.find_element(By.ID, "no-trend").text
        rows = page.find_element(By.ID, "changes").text
        assert "before: v1" in rows and "after: v2" in rows


def test_the_list_pages_and_the_plot_bins_two_hours_with_counts(
    pipeline_worker: WorkerProcess,
) -> None:
    agent = f"history-{uuid.uuid4().hex[:6]}"
    changed_at = write_history(pipeline_worker, agent)
    log = pipeline_worker.log.with_name("explorer-history.log")
    with explorer(pipeline_worker.env, log) as base, browser() as page:
        listing = f"{base}/?agent={urllib.parse.quote(agent)}"

        def listed() -> bool:
            page.get(listing)
            return f"of {HISTORY}" in page.find_element(By.ID, "count").text

        wait_until(listed, 60, lambda: page.page_source)
        assert "showing 1–100 of 150" in page.find_element(By.ID, "count").text
        newest = {
            r.get_attribute("data-request")
            for r in page.find_elements(By.CSS_SELECTOR, "tr.verdict")
        }
        page.find_element(By.CSS_SELECTOR, "a[rel=next]").click()  # older →
        assert "showing 101–150 of 150" in page.find_element(By.ID, "count").text
        query = urllib.parse.parse_qs(urllib.parse.urlparse(page.current_url).query)
        assert query == {"agent": [agent], "page": ["2"]}  # the filter went along
        older = {
            r.get_attribute("data-request")
            for r in page.find_elements(By.CSS_SELECTOR, "tr.verdict")
        }
        assert len(newest) == 100 and len(older) == 50 and not newest & older
        assert f"{agent}-0" in older and not page.find_elements(By.CSS_SELECTOR, "a[rel=next]")
        screenshot(page, "verdicts-older")
        page.find_element(By.CSS_SELECTOR, "a[rel=prev]").click()
        assert "showing 1–100 of 150" in page.find_element(By.ID, "count").text

        page.get(f"{base}/agents/{urllib.parse.quote(agent)}")
        plot = page.find_element(By.CSS_SELECTOR, "svg.plot")
        assert plot.size["width"] > 300 and plot.size["height"] > 100  # drawn, not just there
        bars = plot.find_elements(By.CSS_SELECTOR, "rect.count")
        counts = [int(b.get_attribute("data-count") or 0) for b in bars]
        assert 20 <= len(bars) <= 26 and sum(counts) == HISTORY  # 5-minute bins over 2 hours
        titles = [
            b.find_element(By.TAG_NAME, "title").get_attribute("textContent") or "" for b in bars
        ]
        assert all(t.startswith(f"{c} verdict") for t, c in zip(titles, counts, strict=True))
        assert len(plot.find_elements(By.CSS_SELECTOR, "polyline")) == 3  # no gap in two hours
        assert "bins of 5 minutes" in plot.text
        change = plot.find_element(By.CSS_SELECTOR, "g.version-change")
        assert "v2" in change.text
        rows = page.find_element(By.ID, "changes").text
        assert "before: v1" in rows and "after: v2" in rows
        assert time.strftime("%H:%M", time.gmtime(changed_at)) in rows
        screenshot(page, "agent")


def test_a_request_page_never_scrolls_sideways_at_1400_px(pipeline_worker: WorkerProcess) -> None:
    """A run's text has long unbroken runs (JSON arguments, ids, paths, a token): they wrap, the
    page stays as wide as the window."""
    s = pipeline_worker.settings
    unbroken = '{"path":"' + "/".join(f"segment{i:03d}" for i in range(40)) + '"}'
    with Tracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix) as tracer:
        with tracer.traced("read " + "x" * 300, agent_name=f"wide-{uuid.uuid4().hex[:6]}") as req:
            req.tool_call("read_file", args=unbroken, success=False, error="E" * 400)
            req.final("Could not read " + unbroken)
        assert tracer.flush(10)
        assert tracer.wait_for_evaluation(req.request_id, timeout=60) is not None
    log = pipeline_worker.log.with_name("explorer-wide.log")
    with explorer(pipeline_worker.env, log) as base, browser() as page:
        page.set_window_size(1400, 1000)
        page.get(f"{base}/requests/{urllib.parse.quote(req.request_id)}")
        wait_until(
            lambda: bool(page.find_elements(By.ID, "findings")), 30, lambda: page.page_source
        )
        wide, shown = page.execute_script(
            "return [document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert wide <= shown, (wide, shown)
        screenshot(page, "request-1400")
