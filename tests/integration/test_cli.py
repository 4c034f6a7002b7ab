"""`tracejudge publish` and `tracejudge tail` against a running worker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration.harness import WorkerProcess, produce, produce_events
from tests.realservices import ROOT
from tracejudge.streams.demo.samples import sample_traces

pytestmark = pytest.mark.integration


def cli(worker: WorkerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **worker.env},
        timeout=120,
    )


async def test_publish_then_tail_every_output(
    pipeline_worker: WorkerProcess, tmp_path: Path
) -> None:
    traces = sample_traces(f"cli-{uuid.uuid4().hex[:6]}")[:3]
    path = tmp_path / "traces.jsonl"
    lines = [json.dumps(e) for t in traces for e in t.events]
    path.write_text("\n".join(lines) + "\n\n")
    published = await asyncio.to_thread(cli, pipeline_worker, "publish", str(path))
    assert published.returncode == 0, published.stderr
    assert f"sent {len(lines)} events to {pipeline_worker.topic('events')}" in published.stdout
    rids = {t.request_id for t in traces}

    tailed = await asyncio.to_thread(
        cli, pipeline_worker, "tail", "evaluations", "--from-beginning", "--idle-exit", "5"
    )
    mine = [line for line in tailed.stdout.splitlines() if any(r in line for r in rids)]
    assert len(mine) == 3, tailed.stdout + tailed.stderr
    assert any("score=" in line and "success=False incomplete=True" in line for line in mine)

    as_json = await asyncio.to_thread(
        cli,
        pipeline_worker,
        "tail",
        "evaluations",
        "--json",
        "--from-beginning",
        "--idle-exit",
        "3",
    )
    values = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert rids <= {v["request_id"] for v in values}

    reflections = await asyncio.to_thread(
        cli, pipeline_worker, "tail", "reflections", "--from-beginning", "--idle-exit", "3"
    )
    assert (
        sum(
            1
            for line in reflections.stdout.splitlines()
            if "round=1" in line and any(r in line for r in rids)
        )
        == 2
    )
    alerts = await asyncio.to_thread(
        cli, pipeline_worker, "tail", "alerts", "--from-beginning", "--idle-exit", "3"
    )
    assert any(
        "low_score" in line for line in alerts.stdout.splitlines() if any(r in line for r in rids)
    )


async def test_tail_dlq_shows_the_reason(pipeline_worker: WorkerProcess) -> None:
    marker = uuid.uuid4().hex
    # sent by a producer of its own: `publish` refuses a line that is not a valid event
    bad = {"type": "tool_call", "request_id": marker}
    await produce_events(
        pipeline_worker.settings.kafka_bootstrap, pipeline_worker.topic("events"), [bad]
    )
    for _ in range(10):
        tailed = await asyncio.to_thread(
            cli, pipeline_worker, "tail", "dlq", "--from-beginning", "--idle-exit", "2"
        )
        mine = [line for line in tailed.stdout.splitlines() if marker in line]
        if mine:
            break
    assert len(mine) == 1
    assert mine[0].startswith("invalid_fields: ") and "step_index" in mine[0]
    assert f"from {pipeline_worker.topic('events')}[" in mine[0]


def test_publish_reports_a_missing_file(pipeline_worker: WorkerProcess) -> None:
    result = cli(pipeline_worker, "publish", "/nonexistent/traces.jsonl")
    assert result.returncode == 1 and "cannot read" in result.stderr


async def test_tail_control_shows_early_stop_decisions(pipeline_worker: WorkerProcess) -> None:
    rid = f"cli-stop-{uuid.uuid4().hex[:6]}"
    events = [{"type": "task_started", "request_id": rid, "goal": "find the slow query"}] + [
        {
            "type": "iteration",
            "request_id": rid,
            "step_index": i,
            "iteration": i,
            "max_iterations": 5,
            "response": text,
        }
        for i, text in enumerate(
            ["<Hypothesis>missing index</Hypothesis>", "<Conclusion>Add the index.</Conclusion>"],
            start=1,
        )
    ]
    await produce_events(
        pipeline_worker.settings.kafka_bootstrap, pipeline_worker.topic("events"), events
    )
    for _ in range(20):  # the decision follows the second iteration within milliseconds
        tailed = await asyncio.to_thread(
            cli, pipeline_worker, "tail", "control", "--from-beginning", "--idle-exit", "2"
        )
        mine = [line for line in tailed.stdout.splitlines() if rid in line]
        if mine:
            break
    assert mine == [mine[0]] and "iteration=2 stop (conclusion) | Add the index." in mine[0]


async def test_status_shows_topics_lag_and_the_workers_health(
    pipeline_worker: WorkerProcess,
) -> None:
    url = f"http://127.0.0.1:{pipeline_worker.settings.web_port}"
    shown = await asyncio.to_thread(cli, pipeline_worker, "status", "--worker", url)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "configuration (secrets masked)" in shown.stdout
    assert f"{pipeline_worker.topic('events')} " in shown.stdout
    assert f"{url}  ok (200)" in shown.stdout
    as_json = await asyncio.to_thread(
        cli, pipeline_worker, "status", "--worker", url, "--worker", "http://127.0.0.1:1", "--json"
    )
    assert as_json.returncode == 4  # a worker that does not answer: not ready
    status = json.loads(as_json.stdout)
    topics = {t["topic"]: t for t in status["topics"]}
    events = topics[pipeline_worker.topic("events")]
    assert events["partitions"] == pipeline_worker.settings.partitions
    assert events["lag"] is not None and events["lag"] >= 0
    assert topics[pipeline_worker.topic("evaluations")]["lag"] is None
    codes = [w["code"] for w in status["workers"]]
    assert codes == [200, 0]
    assert status["settings"]["llm_api_key"] in ("", "***")


# What an attacker's trace puts in an id and a name: a window title (OSC), a clear screen, a
# hyperlink, a colour, a carriage return, and a newline with a forged line after it.
FORGED_LINE = "12:00:00 req-42 score=100 PASS"
HOSTILE = (
    "\x1b]0;owned\x07\x1b[2J\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"
    "\x1b[31mred\r\n" + FORGED_LINE
)
OBEYED = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


async def test_tail_shows_hostile_trace_text_and_never_obeys_it(
    pipeline_worker: WorkerProcess,
) -> None:
    rid = f"hostile-{uuid.uuid4().hex[:6]}{HOSTILE}\u202e\x9b"
    evaluation = {
        "type": "evaluation",
        "request_id": rid,
        "agent_name": HOSTILE,
        "overall_score": 10,
        "success": False,
        "incomplete": True,
        "closed_by": "final_response",
        "summary": HOSTILE,
        "ts": 0,
    }
    # written as any producer on the cluster could write it: escaped JSON, and raw bytes
    await produce_events(
        pipeline_worker.settings.kafka_bootstrap, pipeline_worker.topic("evaluations"), [evaluation]
    )
    raw = {**evaluation, "request_id": "raw-" + rid}
    await produce(
        pipeline_worker.settings.kafka_bootstrap,
        pipeline_worker.topic("evaluations"),
        [(b"raw", json.dumps(raw, ensure_ascii=False).encode())],
    )
    for args in ((), ("--json",)):
        tailed = await asyncio.to_thread(
            cli,
            pipeline_worker,
            "tail",
            "evaluations",
            *args,
            "--from-beginning",
            "--idle-exit",
            "3",
        )
        out = tailed.stdout
        assert not [c for c in OBEYED if c in out], repr(out[-400:])
        assert not any(line.startswith(FORGED_LINE) for line in out.splitlines())
        mine = [line for line in out.splitlines() if "hostile-" in line and "raw-" not in line]
        assert len(mine) == 1, out[-2000:]
        if args:  # JSON still, and the same value
            assert json.loads(mine[0])["request_id"] == rid
        else:
            assert "␛" in mine[0] and "␊" in mine[0]
