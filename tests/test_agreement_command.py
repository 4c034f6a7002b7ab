"""`tracejudge agreement EVENTS --labels FILE`: the offline twin of the live agreement figures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.agreement import score_set
from tests.cli import agreement_json as agreement
from tests.cli import as_json
from tests.conftest import TAU_DATA
from tests.fake_llm import FakeLLM, tool_call_reply, verdict
from tracejudge.judges.agreement.rule_rates import rule_rates, rule_table
from tracejudge.judges.agreement.tally import Tally, Truth, auc, cells, kept_of, label_ok
from tracejudge.models.outputs import Evaluation
from tracejudge.settings import Settings
from tracejudge.streams.cli.main import main
from tracejudge.streams.replay.engine import ReplayResult, lines_of, replay

EVENTS = TAU_DATA / "events.jsonl"
LABELS = TAU_DATA / "labels.json"

pytestmark = pytest.mark.usefixtures("rules_only")


def replayed(settings: Settings, events: Path = EVENTS) -> ReplayResult:
    return asyncio.run(replay(settings, lines_of(events.read_bytes())))


def test_the_command_prints_the_figures_the_replays_verdicts_make(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = agreement(capsys, str(EVENTS), "--labels", str(LABELS))
    labels = json.loads(LABELS.read_text())
    result = replayed(Settings(redis_url=""))
    # the tally the live worker keeps: each final verdict joined to its label
    tally = Tally()
    for rid, published in result.evaluations.items():
        truth = Truth(bool(label_ok(labels[rid])), "label")
        tally.add(cells(kept_of(Evaluation.model_validate(published)), truth))
    (agent,) = tally.agents()
    (block,) = doc["blocks"]
    assert (block["agent"], block["version"], block["source"]) == (agent, None, None)
    assert block["views"] == {"rules": as_json(tally.figures("rules", agent=agent).as_dict())}
    rules = block["views"]["rules"]
    assert (rules["runs"], rules["ok_runs"], rules["failed_runs"]) == (40, 20, 20)
    # and the AUC as pairs of runs count it, not through the tally's histograms
    ok = {rid: bool(label_ok(v)) for rid, v in labels.items()}
    scores = {rid: float(e["rule_score"]) for rid, e in result.evaluations.items()}
    assert rules["auc"] == pytest.approx(auc(scores, ok))
    assert rules["auc_interval"][0] < rules["auc"] < rules["auc_interval"][1]
    assert sum(b["runs"] for b in rules["calibration"]) == 40
    assert (doc["verdicts"], doc["labelled"], doc["judged"]) == (40, 40, 0)
    assert (doc["labelled_no_verdict"], doc["verdicts_no_label"]) == (0, 0)
    assert doc["outcomes_by_source"] == {"label": 40}
    # the per-rule table is the benchmark's
    benchmark = score_set("tau", result.evaluations, labels)
    assert block["rules_table"] == as_json([r.as_dict() for r in benchmark.rules])
    assert block["rules_table"], "the subset has findings"


def test_the_text_report_names_each_view_and_the_rule_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["agreement", str(EVENTS), "--labels", str(LABELS)]) == 0
    out = capsys.readouterr().out
    assert (
        "40 final verdicts (rules only" in out
        and "40 labelled requests (outcomes: label 40)" in out
    )
    assert "labelled, no verdict 0   verdict, no label 0   labels not understood 0" in out
    assert "AUC [95 %]" in out and "ok runs alerted" in out and "alert precision" in out
    assert "  rule                           on ok  on failed  ok/failed" in out
    # no judge: the rules' verdicts are the published ones, one row
    assert "\n  rules " in out and "\n  published " not in out


def first_requests(n: int) -> tuple[list[str], list[str]]:
    """The events of the subset's first `n` requests (lines), and their ids."""
    lines = EVENTS.read_text().splitlines()
    rids = list(dict.fromkeys(json.loads(line)["request_id"] for line in lines))[:n]
    return [line for line in lines if json.loads(line)["request_id"] in rids], rids


def test_labels_in_rows_and_outcome_events_count_per_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines, rids = first_requests(6)
    outcomes = [
        {"type": "outcome", "request_id": rids[0], "ok": True, "source": "human"},
        {"type": "outcome", "request_id": rids[1], "score": 0.2, "source": "human"},
        {"type": "outcome", "request_id": rids[2], "score": 5.0},  # out of 0-1: refused
    ]
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines + [json.dumps(o) for o in outcomes]) + "\n")
    rows = [
        {"request_id": rids[0], "ok": True, "source": "test"},
        {"request_id": rids[1], "reward": 1.0, "source": "test"},
        {"request_id": rids[2], "success": False, "source": "test"},
        {"request_id": rids[3], "ok": None, "score": 0.9, "source": "test"},
        {"request_id": rids[3], "ok": False, "source": "test"},  # replaces the one before
        {"request_id": "never-seen", "ok": True, "source": "test"},
        {"request_id": rids[4], "ok": "yes"},  # not a label
        {"request_id": rids[4], "ok": True, "source": "Human Review"},  # not a source token
    ]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc = agreement(capsys, str(events), "--labels", str(labels))
    assert doc["outcomes_by_source"] == {"test": 4, "human": 2}
    assert (doc["verdicts"], doc["labelled"]) == (6, 5)
    assert (doc["labelled_no_verdict"], doc["verdicts_no_label"]) == (1, 2)
    assert doc["labels_not_understood"] == 3
    assert any("event" in e and "outcome" in e for e in doc["not_understood_examples"])
    by_source = {b["source"]: b["views"]["rules"] for b in doc["blocks"]}
    assert set(by_source) == {"human", "test"}  # two sources: never summed into one figure
    assert (by_source["test"]["ok_runs"], by_source["test"]["failed_runs"]) == (2, 2)
    assert (by_source["human"]["ok_runs"], by_source["human"]["failed_runs"]) == (1, 1)


def test_a_json_object_of_labels_with_a_source_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines, rids = first_requests(3)
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({rids[0]: True, rids[1]: 0.0, rids[2]: {"ok": True}}))
    doc = agreement(capsys, str(events), "--labels", str(labels))
    (block,) = doc["blocks"]
    assert (block["views"]["rules"]["ok_runs"], block["views"]["rules"]["failed_runs"]) == (2, 1)
    assert doc["outcomes_by_source"] == {"label": 3}


@pytest.mark.parametrize(
    ("labels_text", "said"),
    [
        ('{"a": true}\nnot json\n', "labels.txt:2: not JSON"),
        ("", "no labels in it"),
        ("42", "not labels"),
    ],
)
def test_a_bad_labels_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], labels_text: str, said: str
) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text(labels_text)
    assert main(["agreement", str(EVENTS), "--labels", str(labels)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and err[0].startswith("tracejudge: bad labels")


def test_missing_files_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["agreement", str(tmp_path / "no.jsonl"), "--labels", str(LABELS)]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["agreement", str(EVENTS), "--labels", str(tmp_path / "no.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # argparse: --labels is required
        main(["agreement", str(EVENTS)])
    assert exited.value.code == 2


def test_help_names_the_labels_and_the_settings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["agreement", "--help"])
    out = capsys.readouterr().out
    assert "--labels FILE" in out and "--json" in out and "TRACEJUDGE_WARN_THRESHOLD" in out


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    # the judge sees what the rules cannot: every run failed, score 20
    with FakeLLM(lambda body, n: tool_call_reply(verdict(False, True, score=20))) as server:
        yield server


def test_with_the_judge_on_rules_judge_and_blend_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake: FakeLLM
) -> None:
    lines, _ = first_requests(8)
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n")
    config = tmp_path / "judge.env"
    config.write_text(f"TRACEJUDGE_LLM_BASE_URL={fake.base_url}\nTRACEJUDGE_LLM_SAMPLE_RATE=1\n")
    doc = agreement(capsys, str(events), "--labels", str(LABELS), "--config", str(config))
    assert doc["judge_on"] and doc["judged"] == 8 and fake.count() >= 8
    views = doc["blocks"][0]["views"]
    assert set(views) == {"rules", "final", "rules_judged", "judge", "blend"}
    # the judge alerted every run; the rules' own verdicts (from the judge jobs) did not
    assert views["judge"]["ok_alerted"]["hits"] == views["judge"]["ok_runs"] > 0
    rules_only = agreement(capsys, str(events), "--labels", str(LABELS))
    assert views["rules"] == views["rules_judged"] == rules_only["blocks"][0]["views"]["rules"]
    assert views["rules"]["ok_alerted"]["hits"] < views["rules"]["ok_runs"]


def test_the_rule_table_says_which_rules_tell_nothing() -> None:
    runs = [(["loop"], True)] * 4 + [(["loop"], False)] * 4 + [(["rare", "rare"], False)]
    rates = {r.rule: r for r in rule_rates([*runs, ([], True), ([], False)])}
    assert (rates["loop"].on_ok.hits, rates["loop"].on_ok.count) == (4, 5)
    assert rates["loop"].useless and not rates["rare"].useless
    assert rates["rare"].on_failed.hits == 1  # a rule fired twice in a run counts once
    table = rule_table(rates.values())
    assert table[1].endswith("<- no better than chance")
    assert table[2].endswith("(fired on 1 run: too few to tell)")
