"""`tracejudge demo --serve` on the embedded broker, then each example agent of examples/ run the
way the README says, against it: each gets its verdict; `tracejudge ui` on the demo's broker shows
the demo's five verdicts in a browser; and Ctrl-C stops the demo."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.integration.browser import browser, explorer, screenshot, wait_until
from tests.integration.serving_demo import serving_demo
from tests.realservices import ROOT

pytestmark = pytest.mark.integration


DEMO_CASES = ("booked", "booked-unconfirmed", "refund-failed", "sms-failed", "went-quiet")


def test_an_example_runs_against_the_serving_demo(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEJUDGE_")}
    env["TRACEJUDGE_REDIS_URL"] = ""  # the embedded broker alone, as on a fresh machine
    with serving_demo(env) as demo:
        serving = demo.wait_for(
            re.compile(r"TRACEJUDGE_KAFKA_BOOTSTRAP=(\S+) TRACEJUDGE_TOPIC_PREFIX=(\S+)").search,
            180,
        )
        for example in ("otel_agent", "langgraph_agent", "openai_agents_agent"):
            ran = subprocess.run(
                [sys.executable, "-m", f"examples.{example}"],
                cwd=ROOT,
                env={
                    **env,
                    "TRACEJUDGE_KAFKA_BOOTSTRAP": serving[1],
                    "TRACEJUDGE_TOPIC_PREFIX": serving[2],
                },
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert ran.returncode == 0, example + ran.stderr[-2000:] + demo.output
            assert ": score " in ran.stdout, example
        demo_env = {
            **env,
            "TRACEJUDGE_KAFKA_BOOTSTRAP": serving[1],
            "TRACEJUDGE_TOPIC_PREFIX": serving[2],
        }
        with explorer(demo_env, tmp_path / "explorer.log") as base, browser() as page:

            def demo_rows() -> list[str]:
                page.get(f"{base}/?agent=demo-agent")
                rows = page.find_elements(By.CSS_SELECTOR, "tr.verdict")
                return [str(r.get_attribute("data-request")).rsplit(":", 1)[-1] for r in rows]

            wait_until(lambda: len(demo_rows()) == 5, 60, lambda: page.page_source)
            assert sorted(demo_rows()) == sorted(DEMO_CASES)
            screenshot(page, "demo-verdicts")
        demo.process.send_signal(signal.SIGINT)
        assert demo.process.wait(60) == 0
