"""A team's checks written only from docs/checks.md, outside the repository: the check module
and the checks file are the page's own code blocks, put in a folder of their own, and the
page's commands (`tracejudge replay --against`, `tracejudge agreement --config`) run there as a
team would run them. What the page promises is what they do. The same files on a live worker:
tests/integration/test_team_checks_live.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "checks.md"
AGENT = "support-bot"  # the page's checks file is for "support-*"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), re.DOTALL)


def team_folder(where: Path) -> Path:
    """The page's check module and checks file, as a team copies them into its own folder."""
    (module,) = [b for b in blocks("python") if b.startswith("# team_checks.py")]
    (where / "team_checks.py").write_text(module)
    (checks,) = [b for b in blocks("toml") if "never_call" in b]
    (where / "checks.toml").write_text(checks)
    return where


def support_run(rid: str, *, amount: str, yes: bool, answer: str) -> list[dict[str, Any]]:
    return [
        {"type": "task_started", "request_id": rid, "goal": "refund order 7",
         "agent_name": AGENT},
        {"type": "tool_call", "request_id": rid, "step_index": 1, "tool": "get_order",
         "args_summary": '{"order_id": 7}', "success": True,
         "result_preview": "order 7: paid, total 54.90"},
        {"type": "user_message", "request_id": rid, "step_index": 2,
         "text": "yes, please refund it" if yes else "what would I get back?"},
        {"type": "tool_call", "request_id": rid, "step_index": 3, "tool": "refund",
         "args_summary": f'{{"amount": {amount}}}', "success": True},
        {"type": "final_response", "request_id": rid, "output": answer},
    ]  # fmt: skip


GOOD = "Refunded 20.00 EUR to your card, reference RF7K2Q."
PROMISE = "Refunded 20.00 EUR, reference RF7K2Q; your new order will arrive by Friday."
# request id -> (its run, whether it went well: the team's labels)
RUNS: dict[str, tuple[list[dict[str, Any]], bool]] = {
    "ok-1": (support_run("ok-1", amount="20.00", yes=True, answer=GOOD), True),
    "ok-2": (support_run("ok-2", amount="54.90", yes=True, answer=GOOD), True),
    "over-total": (support_run("over-total", amount="80.00", yes=True, answer=GOOD), False),
    "no-yes": (support_run("no-yes", amount="20.00", yes=False, answer=GOOD), False),
    "promised": (support_run("promised", amount="20.00", yes=True, answer=PROMISE), False),
}
# what the page says each check finds, by the run it finds it on
EXPECTED = {
    "over-total": "check:team_checks:refund_within_total",
    "no-yes": "check:needs_confirmation",
    "promised": "check:final_must_not_match",
}


def record(where: Path) -> tuple[Path, Path]:
    recorded = where / "recorded.jsonl"
    recorded.write_text("".join(json.dumps(e) + "\n" for run, _ in RUNS.values() for e in run))
    labels = where / "labels.json"
    labels.write_text(json.dumps({rid: ok for rid, (_, ok) in RUNS.items()}))
    return recorded, labels


def tracejudge(where: Path, *args: str) -> str:
    """The console command, run in the team's folder with it on the module path."""
    command = Path(sys.executable).with_name("tracejudge")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRACEJUDGE_")}
    done = subprocess.run(
        [str(command), *args],
        capture_output=True,
        text=True,
        cwd=where,
        env={**clean, "PYTHONPATH": str(where), "TRACEJUDGE_REDIS_URL": ""},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_pages_checks_change_a_replay_as_the_page_says(tmp_path: Path) -> None:
    where = team_folder(tmp_path)
    recorded, labels = record(where)
    (where / "with-check.env").write_text("TRACEJUDGE_CHECKS_FILE=checks.toml\n")
    out = where / "out"
    report = tracejudge(
        where, "replay", recorded.name, "--labels", labels.name, "--against", "with-check.env",
        "--out", out.name,
    )  # fmt: skip
    # without the checks every run passes; with them the three broken ones fail
    assert re.search(r"^passed\s+5\s+2\s+3\s*$", report, re.MULTILINE), report
    for rule in EXPECTED.values():
        assert re.search(rf"^\s+{re.escape(rule)}\s+0 → 1\s*$", report, re.MULTILINE), report
    b = {
        e["request_id"]: e
        for e in map(json.loads, (out / "evaluations-B.jsonl").read_text().splitlines())
    }
    for rid, rule in EXPECTED.items():
        (finding,) = [f for f in b[rid]["findings"] if f["rule"].startswith("check:")]
        assert finding["rule"] == rule and not b[rid]["passed"]
    assert b["no-yes"]["blame"]["step_index"] == 3  # the refund asked without a yes
    assert all(b[rid]["passed"] for rid in ("ok-1", "ok-2"))


def test_the_pages_checks_show_per_check_in_agreement(tmp_path: Path) -> None:
    where = team_folder(tmp_path)
    recorded, labels = record(where)
    (where / "with-check.env").write_text("TRACEJUDGE_CHECKS_FILE=checks.toml\n")
    report = json.loads(
        tracejudge(
            where, "agreement", recorded.name, "--labels", labels.name,
            "--config", "with-check.env", "--json",
        )
    )  # fmt: skip
    text = json.dumps(report)
    for rule in EXPECTED.values():
        assert rule in text, text[:2000]
