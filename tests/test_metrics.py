"""The worker's Prometheus metrics, and the dashboard and alert rules that use them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.memory import memory_worker
from tracejudge.streams.shared.metrics import Metrics, metric_names

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
SERIES = re.compile(r"\b(tracejudge_[a-z_]+)\b")


def samples(exposition: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(exposition.decode())
        for s in family.samples
    }


async def test_handled_records_show_up_with_bounded_labels() -> None:
    w = memory_worker()
    await w.event({"type": "task_started", "request_id": "r", "goal": "refund order 7"})
    await w.event(
        {"type": "tool_call", "request_id": "r", "step_index": 1, "tool": "refund", "success": True}
    )
    await w.event(
        {"type": "tool_call", "request_id": "r", "step_index": 1, "tool": "refund", "success": True}
    )  # the same event again: a duplicate
    await w.event(b"not json")
    got = samples(w.ctx.metrics.exposition())
    assert got[("tracejudge_events_total", (("status", "added"), ("type", "tool_call")))] == 1
    assert got[("tracejudge_events_total", (("status", "duplicate"), ("type", "tool_call")))] == 1
    assert got[("tracejudge_dead_letters_total", (("reason", "not_json"),))] == 1
    assert got[("tracejudge_open_windows", ())] == 1
    await w.event({"type": "final_response", "request_id": "r", "output": "Refunded order 7."})
    got = samples(w.ctx.metrics.exposition())
    assert got[("tracejudge_open_windows", ())] == 0
    quadrant = (("judge_status", "disabled"), ("quadrant", "success_complete"))
    assert got[("tracejudge_evaluations_total", quadrant)] == 1
    assert got[("tracejudge_windows_closed_total", (("closed_by", "final_response"),))] == 1


def used_series() -> dict[str, set[str]]:
    dashboard = json.loads((DEPLOY / "grafana" / "tracejudge.json").read_text())
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    found = {
        "dashboard": {
            name
            for panel in dashboard["panels"]
            for target in panel["targets"]
            for name in SERIES.findall(target["expr"])
        },
        "alerts": {
            name
            for group in rules["groups"]
            for rule in group["rules"]
            for name in SERIES.findall(rule["expr"])
        },
    }
    return found


def test_every_series_the_dashboard_and_the_alerts_use_exists() -> None:
    known = metric_names(Metrics())
    for where, names in used_series().items():
        assert names, where
        assert names <= known, (where, sorted(names - known))


def test_the_alert_rules_cover_what_ops_asked_for() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert set(by_name) == {
        "TracejudgeWorkerDown",
        "TracejudgeLagGrowing",
        "TracejudgeDeadLetters",
        "TracejudgeJudgeFallingBack",
        "TracejudgeJudgeBacklog",
        "TracejudgeNoEvaluations",
    }
    assert all(r["labels"]["severity"] in {"warning", "critical"} for r in by_name.values())


def test_every_alert_has_a_runbook_entry_and_a_gone_target_fires() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    runbook = (DEPLOY.parent / "docs" / "operations.md").read_text()
    headings = {line[3:].strip().lower() for line in runbook.splitlines() if line.startswith("## ")}
    for rule in (r for g in rules["groups"] for r in g["rules"]):
        anchor = rule["annotations"]["runbook_url"].rsplit("#", 1)[1]
        assert anchor == rule["alert"].lower() and anchor in headings, rule["alert"]
    down = next(
        r for g in rules["groups"] for r in g["rules"] if r["alert"] == "TracejudgeWorkerDown"
    )
    assert "absent(up" in down["expr"]


def test_the_dashboard_reads_its_datasource_from_a_variable() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "tracejudge.json").read_text())
    [variable] = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    uids = {p["datasource"]["uid"] for p in dashboard["panels"] if "datasource" in p}
    assert uids == {"${" + variable["name"] + "}"}


def test_process_gc_build_and_per_agent_score_series_are_served() -> None:
    metrics = Metrics()
    metrics.agents.evaluated("support-bot", 85, True)
    metrics.agents.evaluated("support-bot", 40, False)
    metrics.agents.evaluated(None, 70, True)
    got = samples(metrics.exposition())
    names = {name for name, _ in got}
    assert {"process_cpu_seconds_total", "python_gc_objects_collected_total"} <= names
    assert {"process_resident_memory_bytes", "python_info"} <= names
    [build] = [labels for name, labels in got if name == "tracejudge_build_info"]
    assert dict(build)["version"]
    bot = (("agent", "support-bot"),)
    assert got[("tracejudge_evaluation_score_count", bot)] == 2
    assert got[("tracejudge_evaluation_score_bucket", (*bot, ("le", "50.0")))] == 1
    assert got[("tracejudge_agent_evaluations_total", (*bot, ("passed", "true")))] == 1
    assert (
        got[
            (
                "tracejudge_agent_evaluations_total",
                (("agent", "(no agent name)"), ("passed", "true")),
            )
        ]
        == 1
    )
