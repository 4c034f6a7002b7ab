"""A team's path from trying a check to leaving it on, from docs/checks.md alone and with its
own commands: the check in code and the checks file as the docs write them, kept outside the
repository and found by PYTHONPATH; tried with `tracejudge replay --against`; served in the
demo (which keeps serving with the team's tables); the team's recording published to it and
its flagged run found in the explorer by check (in Chromium); a team dimension under its
threshold alerting; and an agent whose control key is not the worker's seen in
`tracejudge status`. The judge is the scripted fake model on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.fake_llm import FakeLLM, tool_call_reply, verdict
from tests.integration.browser import browser, explorer, screenshot, wait_until
from tests.integration.harness import consume
from tests.integration.serving_demo import serving_demo
from tests.realservices import ROOT
from tracejudge.client import Tracer
from tracejudge.models.signing import new_mac_key

pytestmark = pytest.mark.integration

DOCS = (ROOT / "docs" / "checks.md").read_text()
WORKER_KEY = new_mac_key("prod")
AGENT_KEY = new_mac_key("staging")  # the mistake: another deployment's key on one agent


def block(language: str, starts: str) -> str:
    """The docs' code block in `language` whose text starts with `starts`."""
    for found in re.finditer(rf"^( *)```{language}\n(.*?)^ *```", DOCS, re.S | re.M):
        text = textwrap.dedent(found.group(2))  # a block inside a list item is indented
        if text.startswith(starts):
            return text
    raise AssertionError(f"docs/checks.md has no {language} block starting {starts!r}")


def team_folder(tmp_path: Path) -> Path:
    """What the team writes, outside the repository, from the docs."""
    team = tmp_path / "team-checks"
    team.mkdir()
    (team / "team_checks.py").write_text(block("python", "# team_checks.py"))
    (team / "checks.toml").write_text(block("toml", "[default]\nnever_call"))
    criteria = block("toml", '[agents."support-*"]\nversion')
    criteria += block("toml", '[agents."support-*".dimensions]')
    criteria += block("toml", '[agents."support-*".thresholds]')
    (team / "criteria.toml").write_text(criteria)
    return team


def recording(path: Path, prefix: str) -> dict[str, bool]:
    """The team's own recorded runs: a refund over the order's total (the docs' check fails
    it), and one done right; their labels."""

    def run(rid: str, amount: str) -> list[dict[str, Any]]:
        common = {"request_id": rid, "agent_name": "support-bot"}
        return [
            {**common, "type": "task_started", "goal": "refund order 7"},
            {**common, "type": "tool_call", "step_index": 1, "tool": "get_order",
             "args_summary": '{"order_id": 7}', "success": True,
             "result_preview": "order 7: total 54.90"},
            {**common, "type": "user_message", "step_index": 2, "text": "yes, go ahead"},
            {**common, "type": "tool_call", "step_index": 3, "tool": "refund",
             "args_summary": f'{{"amount": {amount}}}', "success": True,
             "result_preview": "refund R7K2Q9 made"},
            {**common, "type": "final_response", "step_index": 4,
             "output": f"Refunded {amount} EUR for order 7; reference R7K2Q9."},
        ]  # fmt: skip

    events = run(f"{prefix}over", "80.00") + run(f"{prefix}ok", "20.00")
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return {f"{prefix}over": False, f"{prefix}ok": True}


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        # a judge pleased by everything, but for the team's policy: 30, under its threshold
        server.script = lambda body, n: tool_call_reply(
            verdict(True, False, 90, policy_compliance=30)
        )
        yield server


def test_a_team_goes_from_a_check_in_the_docs_to_leaving_it_on(
    tmp_path: Path, fake: FakeLLM
) -> None:
    team = team_folder(tmp_path)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRACEJUDGE_")}
    base = {**clean, "PYTHONPATH": str(team), "TRACEJUDGE_REDIS_URL": ""}

    # 1. try it on a recording, as "Trying a check before turning it on" says
    recorded = tmp_path / "recorded.jsonl"
    labels = recording(recorded, "tried-")
    (tmp_path / "labels.json").write_text(json.dumps(labels))
    (tmp_path / "with-check.env").write_text("TRACEJUDGE_CHECKS=team_checks:refund_within_total\n")
    tried = cli("replay", str(recorded), "--labels", str(tmp_path / "labels.json"),
                "--against", str(tmp_path / "with-check.env"), env=base)  # fmt: skip
    assert tried.returncode == 0, tried.stderr[-2000:]
    assert "B: rules only" in tried.stdout and "team checks: 1 in code" in tried.stdout
    assert "check:team_checks:refund_within_total" in tried.stdout

    # 2. serve it in the demo with the team's tables, a judge and control keys
    served = {
        **base,
        "TRACEJUDGE_CHECKS_FILE": str(team / "checks.toml"),
        "TRACEJUDGE_LLM_BASE_URL": fake.base_url,
        "TRACEJUDGE_LLM_SAMPLE_RATE": "1",
        "TRACEJUDGE_LLM_CRITERIA_FILE": str(team / "criteria.toml"),
        "TRACEJUDGE_CONTROL_KEYS": WORKER_KEY,
    }
    with serving_demo(served) as demo:
        found = demo.wait_for(
            re.compile(r"(TRACEJUDGE_KAFKA_BOOTSTRAP=\S+ TRACEJUDGE_TOPIC_PREFIX=\S+ "
                       r"TRACEJUDGE_REDIS_URL=\S*) \.venv/bin/tracejudge status --worker (\S+)"
                       ).search,
            240,
        )  # fmt: skip
        demo_env = {**base, **dict(w.split("=", 1) for w in found.group(1).split())}
        worker = found.group(2)
        assert "unexpected verdicts" not in demo.output  # the team's tables are a playground

        # 3. the team's recording published to it: its flagged run found by check
        labels = recording(recorded, "live-")
        published = cli("publish", str(recorded), env=demo_env)
        assert published.returncode == 0, published.stderr
        with explorer(demo_env, tmp_path / "explorer.log") as ui, browser() as page:

            def listed() -> list[str]:
                page.get(f"{ui}/?check=team_checks:refund_within_total")
                rows = page.find_elements(By.CSS_SELECTOR, "tr.verdict")
                return [str(r.get_attribute("data-request")) for r in rows]

            wait_until(lambda: listed() == ["live-over"], 90, lambda: page.page_source)
            options = [
                o.text for o in page.find_elements(By.CSS_SELECTOR, "select[name=check] option")
            ]
            assert "team_checks:refund_within_total" in options
            screenshot(page, "team-check-filter")

        # 4. the team's dimension under its threshold: a low_dimension alert per run
        prefix = demo_env["TRACEJUDGE_TOPIC_PREFIX"]
        bootstrap = demo_env["TRACEJUDGE_KAFKA_BOOTSTRAP"]

        def low(records: list[Any]) -> list[dict[str, Any]]:
            alerts = [json.loads(r.value) for r in records]
            return [a for a in alerts if a["kind"] == "low_dimension"]

        alerts = asyncio.run(consume(
            bootstrap, f"{prefix}alerts", until=lambda rs: len(low(rs)) >= 2, timeout_s=90
        ))  # fmt: skip
        assert {(a["request_id"], a["dimension"]) for a in low(alerts)} == {
            ("live-over", "policy_compliance"),
            ("live-ok", "policy_compliance"),
        }

        # 5. one agent with another deployment's key: seen in `tracejudge status`
        tracer = Tracer(bootstrap, topic_prefix=prefix, control_keys=AGENT_KEY)
        try:
            req = tracer.request("where is order 7?", agent_name="support-eu")
            for _ in range(3):  # the same failing call: the worker steers the loop
                req.tool_call("get_order", success=False, args={"order_id": 7},
                              error="upstream timeout")  # fmt: skip
            reader = tracer._reader
            assert reader is not None
            deadline = time.monotonic() + 30
            while reader.counts().get("refused_unknown_key", 0) < 1:
                assert time.monotonic() < deadline, reader.counts()
                req.reasoning("waiting for the order service")  # the run stays open
                time.sleep(0.5)
            req.final("I could not reach the order service.")
            assert tracer.wait_for_evaluation(req.request_id, timeout=60) is not None
        finally:
            tracer.close()
        status = cli("status", "--worker", worker, env=demo_env)
        assert "signs control with hmac:prod" in status.stdout, status.stdout
        assert re.search(
            r"agent support-eu: refused 1 \(1 unknown_key\): its TRACEJUDGE_CONTROL_KEYS and "
            r"the worker's differ", status.stdout
        ), status.stdout  # fmt: skip

        demo.process.send_signal(signal.SIGINT)
        assert demo.process.wait(60) == 0
