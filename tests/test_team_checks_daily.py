"""What a team that leaves its checks on meets every day: the runs its checks touched are found
(the explorer filters by finding and by check, and keeps their timelines), one error path
for a settings file that names a check it cannot import, a demo that keeps serving with the
team's tables, and a score shown as the threshold tested it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.memory import memory_worker
from tests.realservices import ROOT
from tests.test_checks import refund_run
from tests.test_explorer import client_for
from tracejudge.judges.checks.book import CheckBook, check
from tracejudge.settings import Settings
from tracejudge.streams.demo.run import _verdicts_said
from tracejudge.streams.demo.samples import sample_traces
from tracejudge.streams.explorer.show import render, score_shown
from tracejudge.streams.explorer.store import VerdictStore


async def checked_runs(tmp_path: Path) -> list[dict[str, Any]]:
    """Three runs of one agent: one a check failed, one it only noted, one it never touched."""
    path = tmp_path / "checks.toml"
    path.write_text('[default]\nneeds_confirmation = ["refund"]\n')
    w = memory_worker(checks_file=str(path), checks="tests.team_checks:note_every_refund")
    for rid, confirmed in (("flagged", False), ("noted", True)):
        for event in refund_run("20.00", confirmed=confirmed):
            await w.event({**event, "request_id": rid})
    clean = [e for e in refund_run("20.00") if e.get("tool") != "refund"]
    for event in clean:
        await w.event({**event, "request_id": "clean"})
    return w.channel("evaluations").values()


async def test_the_explorer_finds_the_runs_a_check_touched(tmp_path: Path) -> None:
    evaluations = await checked_runs(tmp_path)
    by_id = {e["request_id"]: e for e in evaluations}
    assert by_id["noted"]["passed"] and by_id["clean"]["passed"]
    # the noted run passed, but a check touched it: its timeline is kept to be opened
    assert by_id["noted"]["timeline"] == "kept" and by_id["flagged"]["timeline"] == "kept"
    assert by_id["clean"]["timeline"] == "not_flagged"
    store = VerdictStore(capacity=10)
    for e in evaluations:
        store.add_evaluation(e)
    assert "needs_confirmation" in store.checks()
    assert "check:tests.team_checks:note_every_refund" in store.findings()
    client = await client_for(store)
    try:
        page = await (await client.get("/?check=needs_confirmation")).text()
        assert "/requests/flagged" in page and "/requests/noted" not in page
        page = await (
            await client.get("/?finding=check:tests.team_checks:note_every_refund")
        ).text()
        assert "/requests/noted" in page and "/requests/clean" not in page
        listed = await (await client.get("/")).text()
        assert '<select name="check">' in listed and '<select name="finding">' in listed
    finally:
        await client.close()


def test_a_step_wise_check_steers_unless_the_team_says_stop(tmp_path: Path) -> None:
    path = tmp_path / "checks.toml"
    path.write_text(
        '[default]\nnever_call = ["refund"]\n\n[agents."strict-*"]\non_step = "stop"\n'
        'never_call = ["refund"]\n'
    )
    book = CheckBook.read("", str(path), entry_points_on=False)
    assert [c.action for c in book.for_agent("support")] == ["steer"]
    assert [c.action for c in book.for_agent("strict-bot")] == ["stop"]

    @check(per_step=True)
    def steered(run: Any) -> None:
        return None

    @check(per_step=True, action="stop")
    def stopped(run: Any) -> None:
        return None

    marks = [getattr(f, "__tracejudge_check__", None) for f in (steered, stopped)]
    assert [m["action"] for m in marks if m] == ["steer", "stop"]


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
        env={"PATH": "/usr/bin:/bin", "TRACEJUDGE_REDIS_URL": "", **env},
    )  # fmt: skip


def test_a_check_that_cannot_be_imported_is_one_line_whichever_way_it_is_named(
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"type": "task_started", "request_id": "r", "goal": "x"}) + "\n")
    bad = tmp_path / "b.env"
    bad.write_text("TRACEJUDGE_CHECKS=team_checks_nowhere:refund_within_total\n")
    said = "cannot be imported: No module named 'team_checks_nowhere'"
    for args, env in (
        (["replay", str(events), "--against", str(bad)], {}),
        (["replay", str(events), "--config", str(bad)], {}),
        (["replay", str(events)], {"TRACEJUDGE_CHECKS": "team_checks_nowhere:refund_within_total"}),
        (["agreement", str(events), "--labels", str(events), "--config", str(bad)], {}),
    ):
        done = cli(*args, **env)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0] and "Traceback" not in done.stderr, lines
        assert lines[0].startswith("tracejudge: bad configuration: ")
    assert f"settings B ({bad})" in cli("replay", str(events), "--against", str(bad)).stderr


def test_the_demo_says_what_the_teams_tables_changed_and_goes_on(tmp_path: Path) -> None:
    traces = sample_traces("d")
    verdicts = {
        t.request_id: {
            "closed_by": t.expect_closed_by,
            "success": t.expect_success,
            "incomplete": t.expect_incomplete,
            "judge_status": "disabled",
        }
        for t in traces
    }
    booked = traces[0].request_id
    verdicts[booked] = {**verdicts[booked], "success": False}  # a team's check failed it
    path = tmp_path / "checks.toml"
    path.write_text('[default]\nnever_call = ["book_reservation"]\n')
    assert _verdicts_said(traces, verdicts, Settings(redis_url="")) == [traces[0].name]
    assert _verdicts_said(traces, verdicts, Settings(redis_url="", checks_file=str(path))) == []


def test_a_score_rounded_up_to_the_threshold_is_shown_as_tested() -> None:
    failing = {"overall_score": 60, "overall_exact": 59.6, "warn_threshold": 60, "passed": False}
    assert score_shown(failing) == "59.6"
    assert score_shown({**failing, "overall_exact": 60.4, "passed": True}) == "60"
    assert score_shown({"overall_score": 72, "warn_threshold": 60}) == "72"  # an older record
    shown = render(
        {**failing, "request_id": "r", "success": True, "incomplete": False, "summary": "s",
         "judge_status": "disabled", "closed_by": "final_response", "findings": []},
        [],
    )  # fmt: skip
    assert "score 59.6 (fail; threshold 60)" in shown


def test_a_complete_run_with_a_failure_to_make_good_never_says_work_remains() -> None:
    from tests.test_rules import window_of
    from tests.test_stopped_verdicts import verdict_of

    sms = next(t for t in sample_traces("s") if t.name == "failed, complete")
    e = verdict_of(window_of(sms.events)).evaluation
    assert not e.incomplete and e.remaining_steps  # the SMS never sent: a failure, not work
    assert "failed step(s) to make good" in e.summary and "work remaining" not in e.summary
    shown = render(e.model_dump(mode="json"), [])
    assert "to make good (the goal was reached):" in shown and "\nremaining:" not in shown
