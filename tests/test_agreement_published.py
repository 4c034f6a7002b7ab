"""`tracejudge agreement --evaluations FILE --labels FILE`: the labels joined to the verdicts the
worker published (`tracejudge tail evaluations --json`), not to a re-evaluation
(the live worker's verdicts depend on the order runs close, a replay's on file order)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli import agreement_json as agreement
from tests.cli import as_json
from tests.conftest import TAU_DATA
from tests.fake_llm import FakeLLM, tool_call_reply, verdict
from tracejudge.judges.agreement.tally import Tally, Truth, cells, kept_of, label_ok
from tracejudge.models.outputs import Evaluation
from tracejudge.settings import Settings
from tracejudge.streams.cli.main import main
from tracejudge.streams.replay.engine import lines_of, replay

EVENTS = TAU_DATA / "events.jsonl"
LABELS = TAU_DATA / "labels.json"

pytestmark = pytest.mark.usefixtures("rules_only")


def evaluations_of(events: Path, settings: Settings) -> dict[str, dict[str, Any]]:
    return asyncio.run(replay(settings, lines_of(events.read_bytes()))).evaluations


def jsonl(path: Path, values: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(v) + "\n" for v in values))
    return path


def pending_copy(evaluation: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The rules' verdict as it goes out while the judge's is on its way."""
    return {**evaluation, "final": False, "judge_status": "skipped", **changes}


def test_published_evaluations_give_the_tally_built_from_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    published = evaluations_of(EVENTS, Settings(redis_url=""))
    labels = json.loads(LABELS.read_text())
    rids = list(published)
    lines: list[dict[str, Any]] = []
    for i, rid in enumerate(rids):
        final = published[rid]
        # a pending one, however low it scored, is never a verdict of its own
        lines.append(pending_copy(final, overall_score=0, rule_score=0, passed=False))
        if i % 4 == 0:  # published twice (a redelivery made it anew): the last final wins
            lines.append({**final, "overall_score": 100, "rule_score": 100, "passed": True})
        lines.append(final)
    lines.append(pending_copy(published[rids[0]], request_id="judge-never-answered"))
    path = jsonl(tmp_path / "evaluations.jsonl", lines)
    doc = agreement(capsys, "--evaluations", str(path), "--labels", str(LABELS))

    tally = Tally()
    for rid, final in published.items():
        truth = Truth(bool(label_ok(labels[rid])), "label")
        tally.add(cells(kept_of(Evaluation.model_validate(final)), truth))
    (agent,) = tally.agents()
    (block,) = doc["blocks"]
    assert block["views"] == {"rules": as_json(tally.figures("rules", agent=agent).as_dict())}
    assert (block["views"]["rules"]["runs"], doc["verdicts"], doc["labelled"]) == (40, 40, 40)
    assert doc["verdicts_from"] == "evaluations"
    assert doc["evaluations_read"] == len(lines)
    assert (doc["pending_skipped"], doc["pending_only"]) == (41, 1)
    assert doc["rules_view_approximated"] == 0
    # the rules' own table, from the published findings: the replay's, as the verdicts are
    replayed = agreement(capsys, str(EVENTS), "--labels", str(LABELS))
    assert replayed["verdicts_from"] == "replay"
    assert block["rules_table"] == replayed["blocks"][0]["rules_table"]


def test_the_text_report_says_where_the_verdicts_come_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    published = evaluations_of(EVENTS, Settings(redis_url=""))
    path = jsonl(tmp_path / "ev.jsonl", [*published.values(), {"type": "alert"}])
    path.write_text(path.read_text() + "not json\n")
    assert main(["agreement", "--evaluations", str(path), "--labels", str(LABELS)]) == 0
    out = capsys.readouterr().out
    assert f"40 final verdicts as published, read from {path}" in out
    assert "evaluations read 42: pending skipped 0, not understood 2" in out
    assert "ev.jsonl:41: not an evaluation (type alert)" in out
    assert "ev.jsonl:42: not JSON" in out
    assert "approximated" not in out  # rules only: the evaluations are the rules' own


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    # the judge fails every run, score 20: its verdict replaces the rules' success
    with FakeLLM(lambda body, n: tool_call_reply(verdict(False, True, score=20))) as server:
        yield server


def test_judged_requests_keep_the_rules_view_of_their_pending_evaluation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake: FakeLLM
) -> None:
    lines = EVENTS.read_text().splitlines()
    rids = list(dict.fromkeys(json.loads(line)["request_id"] for line in lines))[:8]
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(x for x in lines if json.loads(x)["request_id"] in rids) + "\n")
    config = tmp_path / "judge.env"
    config.write_text(f"TRACEJUDGE_LLM_BASE_URL={fake.base_url}\nTRACEJUDGE_LLM_SAMPLE_RATE=1\n")
    # the re-evaluation knows each judge job's rules: its figures are the live worker's
    exact = agreement(capsys, str(events), "--labels", str(LABELS), "--config", str(config))
    judged = evaluations_of(
        events, Settings(redis_url="", llm_base_url=fake.base_url, llm_sample_rate=1.0)
    )
    rules = evaluations_of(events, Settings(redis_url=""))
    assert all(e["judge_status"] == "ok" for e in judged.values())
    # as on the topic: each request's rules' verdict (pending), then the judge's (final)
    path = jsonl(
        tmp_path / "evaluations.jsonl",
        [e for rid in rids for e in (pending_copy(rules[rid]), judged[rid])],
    )
    doc = agreement(capsys, "--evaluations", str(path), "--labels", str(LABELS))
    assert doc["blocks"][0]["views"] == exact["blocks"][0]["views"]
    assert set(doc["blocks"][0]["views"]) == {"rules", "final", "rules_judged", "judge", "blend"}
    assert (doc["judged"], doc["rules_view_approximated"], doc["judge_on"]) == (8, 0, True)

    # without the pending ones the rules' own success is lost: approximated, and said
    finals = jsonl(tmp_path / "finals.jsonl", [judged[rid] for rid in rids])
    rough = agreement(capsys, "--evaluations", str(finals), "--labels", str(LABELS))
    assert rough["rules_view_approximated"] == 8
    views = rough["blocks"][0]["views"]
    for name in ("final", "judge", "blend"):
        assert views[name] == exact["blocks"][0]["views"][name]
    assert views["rules"] != exact["blocks"][0]["views"]["rules"]  # the pending ones matter
    assert main(["agreement", "--evaluations", str(finals), "--labels", str(LABELS)]) == 0
    assert "rules' own view of 8 judged requests is approximated" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "none given"),
        ([str(EVENTS), "--evaluations", str(EVENTS)], "not both"),
    ],
)
def test_exactly_one_source_of_verdicts(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert main(["agreement", *args, "--labels", str(LABELS)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "--evaluations FILE" in err[0]
    assert "EVENTS" in err[0]


def test_a_file_without_evaluations_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the events themselves given by mistake: not one evaluation in them
    assert main(["agreement", "--evaluations", str(EVENTS), "--labels", str(LABELS)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no evaluation" in err[0]
    assert "tracejudge tail evaluations --json" in err[0]
    missing = tmp_path / "no.jsonl"
    assert main(["agreement", "--evaluations", str(missing), "--labels", str(LABELS)]) == 2
    assert f"cannot read {missing}" in capsys.readouterr().err


def test_each_failure_mode_is_shown_with_its_share_truly_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where outcomes arrive, a mode that is mostly false alarms shows as such: the same
    table from the published verdicts and from a replay."""
    published = evaluations_of(EVENTS, Settings(redis_url=""))
    labels = json.loads(LABELS.read_text())
    expected: dict[str, list[int]] = {}
    for rid, e in published.items():
        if e.get("mode"):
            counted = expected.setdefault(e["mode"]["name"], [0, 0])
            counted[0] += 1
            counted[1] += not label_ok(labels[rid])
    assert len(expected) >= 2  # the set's runs fall in several modes
    path = jsonl(tmp_path / "evaluations.jsonl", list(published.values()))
    doc = agreement(capsys, "--evaluations", str(path), "--labels", str(LABELS))
    (block,) = doc["blocks"]
    table = {m["name"]: [m["runs"], m["failed"]] for m in block["modes_table"]}
    assert table == expected
    runs = [m["runs"] for m in block["modes_table"]]
    assert runs == sorted(runs, reverse=True)  # the most labelled runs first
    replayed = agreement(capsys, str(EVENTS), "--labels", str(LABELS))
    assert replayed["blocks"][0]["modes_table"] == block["modes_table"]
    assert main(["agreement", "--evaluations", str(path), "--labels", str(LABELS)]) == 0
    out = capsys.readouterr().out
    top = block["modes_table"][0]
    share = f"{top['failed']}/{top['runs']}"
    assert any(
        line.strip().startswith(top["name"][:60]) and share in line for line in out.splitlines()
    )


def test_text_a_file_holds_is_printed_whatever_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lone surrogate (JSON's "\\ud800") in an agent's or a mode's name once ended the
    command with an encoding error; an escape is shown, never obeyed."""
    published = evaluations_of(EVENTS, Settings(redis_url=""))
    lines = []
    for e in published.values():
        if e.get("mode"):
            e["mode"]["name"] = "pay\x1b[31m fails \ud800"
        lines.append({**e, "agent_name": "shop\ud800"})
    path = jsonl(tmp_path / "evaluations.jsonl", lines)
    assert main(["agreement", "--evaluations", str(path), "--labels", str(LABELS)]) == 0
    out = capsys.readouterr().out
    out.encode("utf-8")  # what reached the terminal can be written
    assert "== agent shop\\ud800" in out and "pay␛[31m fails \\ud800" in out
