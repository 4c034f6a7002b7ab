"""A reflected request's chain and the agent's action figures in a real browser (Debian's
Chromium, headless): a request that skips a planned step, judged by a real
worker on the real broker; its reflection request read from the topic; the follow-up the
client's reflection worker would start (its request id from the reflection id, its task_started
naming the origin, round 1) finishing the step left; then the explorer's pages: each request
links to the other, the chain shows both with the follow-up final, and the agent page shows
reflection_1 asked 1, followed up 1, fixed 1 from the action tally in the real Redis.

The pages' screenshots, saved under build/screenshots/ as explorer-chain.png and
explorer-actions.png, are the ones in docs/running.md (copied to docs/images/)."""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.browser import (
    SCREENSHOTS,
    browser,
    capture_element,
    explorer,
    screenshot,
    wait_until,
)
from tests.integration.harness import WorkerProcess, consume, produce_events, values
from tracejudge.client.reflections import follow_up_request_id

pytestmark = pytest.mark.integration
PLAN = ["lookup_order", "refund_payment", "send_confirmation"]
# the explorer reads the action tally at most every 30 s (streams/explorer/agreement.py REFRESH_S)
FIGURES_WAIT_S = 90.0


def origin_events(rid: str, agent: str) -> list[dict[str, Any]]:
    """A refund whose confirmation is skipped: planned, never run."""
    common = {"request_id": rid, "agent_name": agent}
    return [
        {**common, "type": "task_started", "step_index": 0, "planned_steps": PLAN,
         "goal": "Refund order 8812 and confirm it to the customer."},
        {**common, "type": "tool_call", "step_index": 1, "tool": "lookup_order", "success": True,
         "args_summary": '{"order":"8812"}', "result_preview": "order 8812, $54.90"},
        {**common, "type": "tool_call", "step_index": 2, "tool": "refund_payment",
         "success": True, "args_summary": '{"order":"8812"}', "result_preview": "refunded"},
        {**common, "type": "final_response", "step_index": 3,
         "output": "Order 8812 is refunded."},
    ]  # fmt: skip


def follow_up_events(rid: str, parent: str, agent: str, left: list[str]) -> list[dict[str, Any]]:
    """The follow-up: the steps left, linked to its origin, round 1."""
    common = {"request_id": rid, "agent_name": agent}
    return [
        {**common, "type": "task_started", "step_index": 0, "planned_steps": left,
         "parent_request_id": parent, "reflection_round": 1,
         "goal": "Refund order 8812 and confirm it to the customer."},
        {**common, "type": "tool_call", "step_index": 1, "tool": "send_confirmation",
         "success": True, "args_summary": '{"order":"8812"}', "result_preview": "sent"},
        {**common, "type": "final_response", "step_index": 2,
         "output": "Order 8812 is refunded and the confirmation was sent."},
    ]  # fmt: skip


def read(worker: WorkerProcess, topic: str, done: Any) -> list[dict[str, Any]]:
    found = asyncio.run(
        consume(
            worker.settings.kafka_bootstrap,
            worker.topic(topic),
            until=lambda rs: done(values(rs)),
            timeout_s=90,
        )
    )
    return values(found)


def chain(page: WebDriver) -> list[tuple[str, str, bool, bool]]:
    """(request id, round, this request, final) of each link of the page's chain."""
    return [
        (
            li.get_attribute("data-request") or "",
            li.get_attribute("data-round") or "",
            "here" in (li.get_attribute("class") or "").split(),
            "final" in (li.get_attribute("class") or "").split(),
        )
        for li in page.find_elements(By.CSS_SELECTOR, "#chain li.link")
    ]


def figures(page: WebDriver, action: str) -> dict[str, str]:
    cells = page.find_elements(By.CSS_SELECTOR, f'#actions tr[data-action="{action}"] td.num')
    return {c.get_attribute("data-figure") or "": c.text for c in cells}


def test_a_reflected_requests_chain_and_the_agents_action_figures(
    pipeline_worker: WorkerProcess,
) -> None:
    worker, agent = pipeline_worker, f"chain-{uuid.uuid4().hex[:6]}"
    origin = f"{agent}:refund-8812"
    bootstrap = worker.settings.kafka_bootstrap
    asyncio.run(produce_events(bootstrap, worker.topic("events"), origin_events(origin, agent)))
    (asked,) = [
        r
        for r in read(worker, "reflections", lambda vs: any(v["request_id"] == origin for v in vs))
        if r["request_id"] == origin
    ]
    assert asked["reflection_round"] == 1 and asked["remaining_steps"]
    follow_up = follow_up_request_id(asked["reflection_id"])
    events = follow_up_events(follow_up, origin, agent, ["send_confirmation"])
    asyncio.run(produce_events(bootstrap, worker.topic("events"), events))

    def judged(vs: list[dict[str, Any]]) -> bool:
        return any(v["request_id"] == follow_up for v in vs)

    by_request = {v["request_id"]: v for v in read(worker, "evaluations", judged)}
    first, second = by_request[origin], by_request[follow_up]
    assert first["incomplete"] and first["chain_final"] is False
    assert not second["incomplete"] and second["success"] and second["chain_final"] is True
    assert second["origin"]["request_id"] == origin and second["origin"]["found"]

    log = worker.log.with_name("explorer-chain.log")
    with explorer(worker.env, log) as base, browser() as page:

        def page_of(rid: str) -> str:
            return f"{base}/requests/{urllib.parse.quote(rid, safe='')}"

        def both_held() -> bool:
            page.get(page_of(origin))
            return len(chain(page)) == 2

        wait_until(both_held, 60, lambda: page.page_source)
        assert chain(page) == [(origin, "0", True, False), (follow_up, "1", False, True)]
        assert "Final for the chain: round 1" in page.find_element(By.ID, "chain-status").text
        page.find_element(By.CSS_SELECTOR, f'#chain li[data-request="{follow_up}"] a').click()
        assert page.find_element(By.TAG_NAME, "h1").text == f"Request {follow_up}"
        assert chain(page) == [(origin, "0", False, False), (follow_up, "1", True, True)]
        link = page.find_element(By.CSS_SELECTOR, f'#chain li[data-request="{origin}"] a')
        shown = page.find_element(By.ID, "chain-section")
        assert shown.size["height"] > 40 and "score" in shown.text  # drawn, with its figures
        screenshot(page, "request-chain")
        page.save_screenshot(str(SCREENSHOTS / "explorer-chain.png"))  # the docs' picture
        link.click()
        assert page.find_element(By.TAG_NAME, "h1").text == f"Request {origin}"

        agent_page = f"{base}/agents/{urllib.parse.quote(agent, safe='')}"

        def counted() -> bool:  # the tally read by the explorer at most every 30 s
            page.get(agent_page)
            return figures(page, "reflection_1").get("fixed", "").startswith("1")

        wait_until(counted, FIGURES_WAIT_S, lambda: page.page_source)
        got = figures(page, "reflection_1")
        assert (got["asked"], got["followed_up"], got["fixed"]) == ("1", "1 (100%)", "1 (100%)")
        assert (got["late"], got["success"], got["complete"]) == ("0", "1", "1")
        change = second["overall_score"] - first["overall_score"]
        assert got["score_change"] == f"{change:+.1f}"
        assert [
            r.get_attribute("data-action")
            for r in page.find_elements(By.CSS_SELECTOR, "#actions tr[data-action]")
        ] == ["reflection_1"]
        screenshot(page, "agent-actions")
        capture_element(page, SCREENSHOTS / "explorer-actions.png", "actions-section")
        assert (SCREENSHOTS / "explorer-actions.png").stat().st_size > 5_000
