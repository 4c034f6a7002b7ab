"""A team's checks through the worker's own handlers (in memory): their failures in the
evaluation like a built-in rule's, and a check that raises or hangs leaving every request
evaluated in time, counted in /metrics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.memory import memory_worker
from tests.test_checks import refund_run
from tracejudge.streams.explorer.locate import locate

TEAM = "tests.team_checks"


async def evaluate(events: list[dict[str, Any]], **settings: Any) -> tuple[dict[str, Any], Any]:
    w = memory_worker(**settings)
    for event in events:
        await w.event(event)
    (evaluation,) = w.channel("evaluations").values()
    return evaluation, w


async def test_a_failing_check_fails_the_run_names_its_step_and_is_blamed() -> None:
    evaluation, w = await evaluate(refund_run("80.00"), checks=f"{TEAM}:refund_within_total")
    finding = next(f for f in evaluation["findings"] if f["rule"].startswith("check:"))
    assert finding == {
        "rule": f"check:{TEAM}:refund_within_total",
        "evidence": "refund of 80.00 over the order total 54.9",  # the step is its own field
        "version": "1",
        "step": 3,
    }
    # the explorer marks the step the check points at, not every step its words appear in
    timeline: list[dict[str, Any]] = [
        {"type": "task_started", "step": None, "text": "refund order 7"},
        {"type": "tool_call", "step": 1, "tool": "get_order", "result": "order total 54.9"},
        {"type": "tool_call", "step": 3, "tool": "refund"},
    ]
    marks = locate(evaluation, timeline)
    assert [i for i, m in marks.by_entry.items() if finding["rule"] in m] == [2]
    assert not evaluation["passed"] and evaluation["overall_score"] < evaluation["warn_threshold"]
    assert evaluation["blame"]["step_index"] == 3 and "check" in evaluation["blame"]["reason"]
    value = w.ctx.metrics.registry.get_sample_value
    labels = {"check": f"{TEAM}:refund_within_total", "severity": "fail"}
    assert value("tracejudge_check_failures_total", labels) == 1.0
    within, _ = await evaluate(refund_run("20.00"), checks=f"{TEAM}:refund_within_total")
    assert within["passed"] and not any(f["rule"].startswith("check:") for f in within["findings"])


async def test_lower_and_note_change_the_score_or_nothing() -> None:
    base, _ = await evaluate(refund_run("20.00"))
    lowered, _ = await evaluate(refund_run("20.00"), checks=f"{TEAM}:lowers")
    assert lowered["overall_score"] == base["overall_score"] - 15
    assert any(f["rule"] == f"check:{TEAM}:lowers" for f in lowered["findings"])


async def test_a_check_that_raises_or_hangs_leaves_every_request_evaluated_in_time() -> None:
    started = time.monotonic()
    evaluation, w = await evaluate(
        refund_run("80.00"),
        checks=f"{TEAM}:broken,{TEAM}:slow,{TEAM}:refund_within_total",
        check_timeout_s=0.5,
    )
    assert time.monotonic() - started < 1.9  # not the slow check's 2 s
    assert any("check tests.team_checks:broken raised" in r for r in evaluation["reasons"])
    assert any("tests.team_checks:slow timed out" in r for r in evaluation["reasons"])
    assert not evaluation["passed"]  # the check that answered still counts
    value = w.ctx.metrics.registry.get_sample_value
    assert value("tracejudge_check_errors_total", {"check": f"{TEAM}:broken", "kind": "raised"})
    assert value("tracejudge_check_errors_total", {"check": f"{TEAM}:slow", "kind": "timeout"})
    runner = w.ctx.events.closer.check_runner
    assert runner is not None
    runner.close()


async def test_a_check_that_hangs_on_every_run_never_costs_its_neighbours_their_answer() -> None:
    """Eight runs in a row, each with a check that sleeps 2 s against a 0.3 s limit: it is
    ended once, then left out for a while (not restarted per run), and the quick check beside
    it answers on every run."""
    w = memory_worker(checks=f"{TEAM}:slow,{TEAM}:refund_within_total", check_timeout_s=0.3)
    for n in range(8):
        for event in refund_run("80.00"):
            await w.event({**event, "request_id": f"hang-{n}"})
    evaluations = w.channel("evaluations").values()
    assert len(evaluations) == 8
    for evaluation in evaluations:
        rules = [f["rule"] for f in evaluation["findings"]]
        assert f"check:{TEAM}:refund_within_total" in rules, evaluation["reasons"]
        assert any(f"{TEAM}:slow timed out" in r for r in evaluation["reasons"])
    value = w.ctx.metrics.registry.get_sample_value
    assert value("tracejudge_check_errors_total", {"check": f"{TEAM}:slow", "kind": "timeout"}) == 8
    runner = w.ctx.events.closer.check_runner
    assert runner is not None
    assert runner.wall.started <= 4  # two at the start, a replacement or two: not one per run
    runner.close()


async def test_checks_from_the_file_apply_per_agent(tmp_path: Path) -> None:
    path = tmp_path / "checks.toml"
    path.write_text('[agents."support-*"]\nneeds_confirmation = ["refund"]\n')
    evaluation, _ = await evaluate(refund_run("20.00", confirmed=False), checks_file=str(path))
    assert any(f["rule"] == "check:needs_confirmation" for f in evaluation["findings"])
    assert not evaluation["passed"]


def test_agreement_measures_a_check_like_a_rule(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    path = tmp_path / "checks.toml"
    path.write_text('[default]\nfinal_must_match = ["zzz-never-there"]\n')
    data = root / "tests" / "data" / "tau_airline"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRACEJUDGE_")}
    done = subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", "agreement", str(data / "events.jsonl"),
         "--labels", str(data / "labels.json"), "--json"],
        capture_output=True,
        text=True,
        env={**clean, "TRACEJUDGE_REDIS_URL": "", "TRACEJUDGE_CHECKS_FILE": str(path)},
        timeout=120,
        cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "check:final_must_match" in done.stdout


async def refunding(tmp_path: Path, table: str, sent: int) -> tuple[Any, list[dict[str, Any]]]:
    """A worker with the checks file `table`, sent the first `sent` events of a refund run."""
    path = tmp_path / "checks.toml"
    path.write_text(table)
    w = memory_worker(checks_file=str(path))
    events = refund_run("20.00")
    for event in events[:sent]:
        await w.event(event)
    return w, events


async def test_a_per_step_check_steers_by_default_on_the_step_that_breaks_it(
    tmp_path: Path,
) -> None:
    """A check is a check, not a kill switch: unless the team's table says stop, its failure
    steers the run, in the check's own words, and the run goes on to be judged as any other."""
    w, events = await refunding(tmp_path, '[default]\nnever_call = ["refund"]\n', 3)
    assert w.channel("control").values() == []  # nothing broken yet
    await w.event(events[3])  # the refund call
    (told,) = w.channel("control").values()
    assert (told["kind"], told["crossed"], told["action"], told["step_index"]) == (
        "check",
        "never_call",
        "steer",
        3,
    )
    assert "check never_call" in told["message"] and "loop" not in told["message"]
    await w.event(events[4])
    (evaluation,) = w.channel("evaluations").values()
    assert [(m["kind"], m["action"]) for m in evaluation["interventions"]] == [("check", "steer")]
    assert not evaluation["passed"]  # the check failed the run: its own severity says so
    assert len(w.channel("control").values()) == 1  # once per check and run


async def test_a_check_that_stops_judges_the_run_on_what_it_did_and_asks_no_reflection(
    tmp_path: Path,
) -> None:
    """`on_step = "stop"`: the refund the check flagged already went through when the stop
    lands. The run is judged on what it did (not "incomplete, stopped for a loop"), and no
    reflection asks a worker to finish the request, which would refund a second time."""
    table = '[default]\nnever_call = ["refund"]\non_step = "stop"\n'
    w, events = await refunding(tmp_path, table, 4)
    (told,) = w.channel("control").values()
    assert told["action"] == "stop"
    stopped = {**events[4], "output": f"stopped: {told['message']}"}
    await w.event({**stopped, "stopped_by": told["intervention_id"]})
    (evaluation,) = w.channel("evaluations").values()
    assert [(m["kind"], m["crossed"], m["stopped_after"]) for m in evaluation["interventions"]] == [
        ("check", "never_call", True)
    ]
    assert not evaluation["passed"] and evaluation["success"]
    assert not evaluation["incomplete"]  # the refund it was asked for was made
    said = " ".join(evaluation["reasons"] + evaluation["suggestions"])
    assert "the team's check never_call" in said and "loop" not in said
    assert "repeating itself" not in said and "finish the user's request" not in said
    assert w.channel("reflections").values() == []
    assert [a["kind"] for a in w.channel("alerts").values()] == ["low_score"]


def test_a_check_that_hangs_never_keeps_the_worker_from_exiting() -> None:
    """A check stuck for good (here 60 s) is left behind when the process exits: the worker
    stops on SIGTERM instead of waiting for it."""
    import subprocess
    import sys

    script = """
import asyncio, time
from tracejudge.judges.checks.api import Check
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.worker.checks import CheckRunner
from tests.test_checks import refund_run
from tests.test_rules import window_of
from tests.team_checks import stuck
from tracejudge.judges.checks.view import run_of

async def main():
    runner = CheckRunner(0.2, Metrics())
    checked = await runner.run((Check("stuck", stuck),), run_of(window_of(refund_run("1"))))
    assert checked.broken == (("stuck", "timed out"),), checked

asyncio.run(main())
print("done")
"""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    assert time.monotonic() - started < 20  # not the stuck check's 60 s
