"""`tracejudge show` on the real broker and Redis: the evaluation, its findings and the request's
timeline (masked), as text and as JSON; from the topic when there is no Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.integration.harness import WorkerProcess
from tests.realservices import ROOT
from tracejudge.client import Tracer

pytestmark = pytest.mark.integration


def show(worker: WorkerProcess, *args: str, redis: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **worker.env}
    if not redis:
        env["TRACEJUDGE_REDIS_URL"] = ""
    return subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", "show", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_show_puts_the_verdict_next_to_the_masked_steps(pipeline_worker: WorkerProcess) -> None:
    s = pipeline_worker.settings
    rid = f"show-{uuid.uuid4().hex[:6]}"
    with Tracer(s.kafka_bootstrap, redis_url=s.redis_url, topic_prefix=s.topic_prefix) as tracer:
        with tracer.traced("refund order 7 for jane.doe@example.com", request_id=rid) as req:
            req.tool_call(
                "get_order", args={"id": 7}, success=True, result="owner jane.doe@example.com"
            )
            req.tool_call("refund", args={"id": 7}, success=False, error="gateway timeout")
            req.final("I could not refund order 7.")
        assert tracer.flush(10)
        assert tracer.wait_for_evaluation(rid, timeout=30) is not None

    text = show(pipeline_worker, rid)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert f"request {rid}" in out and "success False" in out
    assert "findings:" in out and "unrecovered_failure" in out
    assert "timeline (4 events" in out and "refund" in out
    assert "failed step: " in out and "← blamed" in out
    assert "jane.doe@example.com" not in out  # masked before it was kept

    as_json = show(pipeline_worker, rid, "--json")
    found = json.loads(as_json.stdout)
    assert found["evaluation"]["request_id"] == rid
    assert [t["type"] for t in found["timeline"]] == [
        "task_started",
        "tool_call",
        "tool_call",
        "final_response",
    ]
    assert found["timeline"][2]["success"] is False

    without_redis = show(pipeline_worker, rid, redis=False)
    assert without_redis.returncode == 0, without_redis.stderr
    # the one reason that holds: this command has no Redis (the worker kept the timeline)
    assert "success False" in without_redis.stdout
    assert "timeline: not looked up: TRACEJUDGE_REDIS_URL is empty here" in without_redis.stdout
    assert "TIMELINES" not in without_redis.stdout and "TTL" not in without_redis.stdout
    assert found["evaluation"]["timeline"] == "kept" and found["no_timeline"] is None

    missing = show(pipeline_worker, f"never-{uuid.uuid4().hex[:6]}")
    assert missing.returncode == 1 and "no evaluation" in missing.stderr
