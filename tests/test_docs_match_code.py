"""What the docs state about the code's defaults and series holds: the judge's default selection
(docs/judging.md, docs/judge-operations.md) is the Settings defaults', and every series the
worker serves on /metrics is in docs/running.md's metrics table."""

from __future__ import annotations

import re
from pathlib import Path

from tracejudge.settings import Settings
from tracejudge.streams.agreement import actions, live
from tracejudge.streams.judge.startup import judge_line
from tracejudge.streams.shared.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
JUDGE_PAGES = ("judging.md", "judge-operations.md")
RATE = Settings.model_fields["llm_sample_rate"].default
FLAGGED = Settings.model_fields["llm_judge_flagged"].default
PER_AGENT = Settings.model_fields["llm_sample_rates"].default


def sentences(markdown: str) -> list[str]:
    """The text's sentences, each paragraph's lines joined."""
    found = []
    for paragraph in re.split(r"\n\s*\n", markdown):
        text = " ".join(line.strip() for line in paragraph.splitlines())
        found += re.split(r"(?<=[.!?])\s+(?=[A-Z`(])", text)
    return found


def about_the_default_selection(page: str) -> list[str]:
    return [s for s in sentences((ROOT / "docs" / page).read_text()) if "default selection" in s]


def stated(sentence: str, setting: str) -> list[str]:
    """The values a sentence gives a setting: `NAME=v` or "`NAME` defaults to `v`"."""
    return re.findall(rf"{setting}=([\w.]+)", sentence) + re.findall(
        rf"`{setting}` defaults to `([\w.]+)`", sentence
    )


def test_the_default_selection_the_judge_docs_state_is_the_settings() -> None:
    assert RATE == 1.0 or PER_AGENT == "", "update the checks below to the new defaults"
    for page in JUDGE_PAGES:
        said = about_the_default_selection(page)
        rates = [float(v) for s in said for v in stated(s, "TRACEJUDGE_LLM_SAMPLE_RATE")]
        assert rates, f"docs/{page} states no default TRACEJUDGE_LLM_SAMPLE_RATE"
        assert set(rates) == {RATE}, (page, rates, RATE)
        for s in said:
            for flagged in stated(s, "TRACEJUDGE_LLM_JUDGE_FLAGGED"):
                assert flagged == str(FLAGGED).lower(), (page, s)
            # a share judged at the default selection: the rate's, when it takes every request
            for share in re.findall(r"judg\w*(?: about)? (\d+(?:\.\d+)?) %", s):
                assert RATE == 1.0 and float(share) == 100, (page, s)
            if re.search(r"every closed request|all judged|100 %", s):
                assert RATE == 1.0 and not PER_AGENT, (page, s)


def test_the_start_line_the_docs_show_is_the_one_logged() -> None:
    page = (ROOT / "docs" / "judge-operations.md").read_text()
    block = re.search(r"\n    (LLM judge on: .*?)\.\.\.\n", page, re.S)
    assert block is not None
    shown = " ".join(block.group(1).split())
    logged = judge_line(Settings(redis_url="", llm_api_key="sk-anything"))
    assert logged.startswith(shown), (shown, logged)


def documented_series() -> set[str]:
    """The series named in the first column of docs/running.md's metrics table, with
    `prefix_{a,b}` alternatives spelt out and `{labels}` taken off."""
    text = (ROOT / "docs" / "running.md").read_text()
    table = text.split("| series | what |", 1)[1].split("\n\n", 1)[0]
    names: set[str] = set()
    for row in table.splitlines()[1:]:
        first = row.split(" | ", 1)[0]
        for span in re.findall(r"`([^`]+)`", first):
            m = re.fullmatch(r"([a-z_]+)(?:\{([^}]*)\})?(?:\{[^}]*\})?", span)
            if m is None:
                continue
            stem, braces = m.group(1), m.group(2)
            if stem.endswith("_") and braces:  # alternatives, then the labels
                names |= {stem + part.strip() for part in braces.split(",")}
            else:
                names.add(stem)
    return names


def served_series() -> set[str]:
    """Every tracejudge_* series a worker can serve, with or without samples yet: its
    registry's, and the agreement and action gauges of a refresh."""
    metrics = Metrics()
    families = list(metrics.registry.collect()) + live.families({}) + actions.families({})
    suffix = {"counter": "_total", "info": "_info"}
    return {f.name + suffix.get(f.type, "") for f in families if f.name.startswith("tracejudge_")}


def test_every_series_the_worker_serves_is_in_the_metrics_table() -> None:
    served, documented = served_series(), documented_series()
    assert {"tracejudge_judge_queue_lag", "tracejudge_alert_threshold"} <= served
    missing = sorted(served - documented)
    assert not missing, f"docs/running.md's metrics table lacks: {missing}"
    gone = sorted(n for n in documented - served if n.startswith("tracejudge_"))
    assert not gone, f"docs/running.md's metrics table names series never served: {gone}"
