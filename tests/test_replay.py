"""`tracejudge replay`: the worker's verdicts offline, two settings side by side, labels."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import TAU_DATA
from tests.integration.harness import refund_request
from tests.memory import memory_worker
from tracejudge.judges.windows.records import WindowMeta
from tracejudge.settings import Settings
from tracejudge.streams.cli.main import main
from tracejudge.streams.cli.replay import duration_s
from tracejudge.streams.demo.samples import sample_traces
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.replay.engine import replay, replay_tables


async def test_a_replay_gives_the_memory_workers_verdicts() -> None:
    traces = sample_traces("replay")
    events = [e for t in traces for e in t.events]
    w = memory_worker()
    for event in events:
        await w.event(event)
    for rid in list(w.ctx.store.open):
        await w.ctx.events.closer.close(rid, "idle_timeout")  # as the idle scan would
    expected = {e["request_id"]: e for e in w.channel("evaluations").values()}
    result = await replay(
        Settings(redis_url=""),
        [(e["request_id"].encode(), json.dumps(e).encode()) for e in events],
    )
    assert result.evaluations.keys() == expected.keys()
    for rid, evaluation in result.evaluations.items():
        assert {k: v for k, v in evaluation.items() if k != "ts"} == {
            k: v for k, v in expected[rid].items() if k != "ts"
        }


def test_replay_compares_two_thresholds_and_reports_agreement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEJUDGE_REDIS_URL", "")
    b = tmp_path / "b.env"
    b.write_text("TRACEJUDGE_WARN_THRESHOLD=80\n")
    out = tmp_path / "out"
    code = main(
        [
            "replay",
            str(TAU_DATA / "events.jsonl"),
            "--labels",
            str(TAU_DATA / "labels.json"),
            "--against",
            str(b),
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    a_evaluations = [json.loads(x) for x in (out / "evaluations-A.jsonl").read_text().splitlines()]
    labels = json.loads((TAU_DATA / "labels.json").read_text())
    events = (TAU_DATA / "events.jsonl").read_text().splitlines()
    assert {e["request_id"] for e in a_evaluations} == set(labels)
    between = sum(1 for e in a_evaluations if 60 <= e["overall_score"] < 80)
    assert between > 0  # the data has runs the second threshold flips, or this tests nothing
    assert f"{len(labels)} requests from {len(events)} events (0 dead-lettered)" in printed
    score = {e["request_id"]: e["overall_score"] for e in a_evaluations}
    ok = [score[r] for r, label in labels.items() if label["reward"] == 1.0]
    failed = [score[r] for r, label in labels.items() if label["reward"] == 0.0]
    pairs = [(a > b) + 0.5 * (a == b) for a in ok for b in failed]
    assert (
        f"labels    {len(labels)} labelled ({len(ok)} ok, {len(failed)} failed)   "
        f"AUC {sum(pairs) / len(pairs):.3f}"
    ) in printed
    [passed_row] = [
        line for line in printed.splitlines() if re.fullmatch(r"passed( +\d+){3}", line)
    ]
    assert passed_row.split()[-1] == str(between)  # exactly the scores between 60 and 80 flip
    assert "score        mean delta +0.0, 0 requests moved" in printed
    assert (out / "report.txt").read_text().strip() == printed.strip()


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("45", 45)]
)
def test_durations(text: str, seconds: float) -> None:
    assert duration_s(text) == seconds


async def test_replay_tables_hold_what_a_worker_would_after_the_same_records() -> None:
    settings = Settings(redis_url="")
    done, unfinished = refund_request("done"), refund_request("open")[:2]
    records = [
        InRecord("events", partition, offset, e["request_id"].encode(), json.dumps(e).encode())
        for partition, events in ((1, done), (2, unfinished))
        for offset, e in enumerate(events, start=10)
    ]
    tables = await replay_tables(settings, records)
    meta = {rid: WindowMeta.of_record(r) for rid, r in tables.window_meta.items()}
    assert meta.keys() == {"done"}
    # closed by its final response, at that record's own partition and offset
    assert (meta["done"].closed_by, meta["done"].partition) == ("final_response", 1)
    assert (meta["done"].closed_offset, meta["done"].step_count) == (13, 2)
    # the unfinished request stays open: its two records written, nothing closed at the end
    assert sorted(tables.window_steps) == ["open\x1f000000", "open\x1f000001"]
