"""The loop closed on the real broker: 40 requests of the LangGraph
example (examples/langgraph_reflection.py), every other one skipping a planned step, judged by
a real worker; the example's reflection worker in two processes, one killed with -9 midway,
finishes the skipped work; exactly one follow-up per reflection request, and the figures the
worker reports in `tracejudge status` are what this test counts on the topics."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from examples.langgraph_reflection import AGENT, PLAN, handle_order, skips_a_step
from tests.integration.harness import WorkerProcess, consume, values, worker_env
from tests.realservices import ROOT, stop_process
from tracejudge.client import Tracer
from tracejudge.client.reflections import follow_up_request_id

pytestmark = pytest.mark.integration
ORDERS = 40


def records_of(
    worker: WorkerProcess, topic: str, enough: Any, timeout_s: float = 120.0
) -> list[dict[str, Any]]:
    found = asyncio.run(
        consume(
            worker.settings.kafka_bootstrap,
            worker.topic(topic),
            until=lambda rs: enough(values(rs)),
            timeout_s=timeout_s,
            settle_s=2.0,
        )
    )
    return values(found)


def follow_ups_printed(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("follow-up "))


def status_json(worker: WorkerProcess) -> dict[str, Any]:
    shown = subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", "status", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **worker.env},
        timeout=120,
        check=False,
    )
    found: dict[str, Any] = json.loads(shown.stdout)
    return found


def test_the_langgraph_examples_skipped_steps_are_finished_once_each_and_counted(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    # the idle timeout outlasts the reflection workers' failover (their 10 s session timeout,
    # then the rebalance): a follow-up cut by the kill is redone into its open window, as with
    # the default 300 s. A shorter one judges the cut follow-up first, and its round-2
    # reflection is a second follow-up this test would count.
    env = worker_env(kafka_bootstrap, redis_url, tmp_path, "loop", idle_timeout_s=30)
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    agents_env = {
        **os.environ,
        "TRACEJUDGE_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TRACEJUDGE_TOPIC_PREFIX": worker.settings.topic_prefix,
    }

    def reflection_process(name: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "examples.langgraph_reflection", "--worker-only"],
            cwd=ROOT,
            env=agents_env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        return process, log

    (first, first_log), (second, second_log) = reflection_process("a"), reflection_process("b")
    processes, logs = (first, second), (first_log, second_log)
    judged = Tracer(kafka_bootstrap, topic_prefix=worker.settings.topic_prefix)
    try:
        # the first half, then the kill once the first process has run some follow-ups; the
        # second half while one process is left (and the dead one's partitions move to it)
        origins = {handle_order(judged, n): n for n in range(1, ORDERS // 2 + 1)}
        assert judged.flush(30)
        # either process may have joined the group first and hold every partition: the one
        # that ran follow-ups is killed
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and max(map(follow_ups_printed, logs)) < 3:
            assert all(p.poll() is None for p in processes), "a reflection worker exited"
            time.sleep(0.05)
        busy = max((0, 1), key=lambda i: follow_ups_printed(logs[i]))
        killed, killed_log = processes[busy], logs[busy]
        survivor_log = logs[1 - busy]
        assert follow_ups_printed(killed_log) >= 3, killed_log.read_text()
        killed.kill()
        killed.wait(10)
        origins |= {handle_order(judged, n): n for n in range(ORDERS // 2 + 1, ORDERS + 1)}
        assert judged.flush(30)
        skipping = {rid for rid, n in origins.items() if skips_a_step(n)}
        assert len(skipping) == ORDERS // 2

        asked = records_of(worker, "reflections", lambda vs: len(vs) >= len(skipping))
        wanted = {follow_up_request_id(r["reflection_id"]): r for r in asked}
        evaluations = records_of(
            worker,
            "evaluations",
            lambda vs: wanted.keys() <= {v["request_id"] for v in vs if v.get("final", True)},
            timeout_s=180,
        )
        events = records_of(
            worker,
            "events",
            lambda vs: (
                wanted.keys() <= {v.get("request_id") for v in vs if "parent_request_id" in v}
            ),
        )
        # what tracejudge reports: `tracejudge status` reads the worker's counts in Redis
        reported = status_json(worker)
    finally:
        judged.close()
        stop_process(first)
        stop_process(second)
        worker.stop()
    printed = follow_ups_printed(first_log) + follow_ups_printed(second_log)
    assert follow_ups_printed(survivor_log) >= ORDERS // 4, "the survivor took over nothing"

    # one reflection request per skipping run, none for the others
    assert Counter(r["request_id"] for r in asked) == Counter(skipping)
    assert all([x["step"] for x in r["remaining"]] == PLAN[-1:] for r in asked)
    # exactly one follow-up per reflection request, linked to its origin, whatever was redone
    started = [e for e in events if e.get("type") == "task_started" and e.get("parent_request_id")]
    assert {e["request_id"] for e in started} == set(wanted)
    for e in started:
        assert e["parent_request_id"] == wanted[e["request_id"]]["request_id"]
        assert (e["reflection_round"], e["agent_name"]) == (1, AGENT)
    assert printed - len(wanted) <= 2, "more than the request in hand at the kill was redone"

    # what the test counts itself: the follow-ups' final verdicts on the evaluations topic
    finals = {
        v["request_id"]: v for v in evaluations if v["request_id"] in wanted and v.get("final")
    }
    assert set(finals) == set(wanted)
    fixed = sum(1 for v in finals.values() if v["success"] and not v["incomplete"])
    for v in finals.values():
        assert v["origin"]["found"] and v["origin"]["incomplete"] is True
        assert v["reflection_round"] == 1
    origin_scores = {
        v["request_id"]: v["overall_score"]
        for v in evaluations
        if v["request_id"] in skipping and v.get("final")
    }
    change = sum(
        v["overall_score"] - origin_scores[wanted[rid]["request_id"]] for rid, v in finals.items()
    ) / len(finals)

    figures = reported["actions"][AGENT]["reflection_1"]
    print(
        f"orders {ORDERS}; reflection requests {len(asked)}; callbacks run {printed} "
        f"(killed process {follow_ups_printed(killed_log)}, survivor "
        f"{follow_ups_printed(survivor_log)}); follow-ups {len(finals)}; fixed {fixed}; "
        f"mean score change {change:+.1f}; tracejudge status: {figures}"
    )
    assert figures["asked"] == len(asked)
    assert figures["followed_up"] == len(finals)
    assert figures["fixed"] == fixed
    assert figures["complete"] == sum(1 for v in finals.values() if not v["incomplete"])
    assert figures["mean_score_change"] == pytest.approx(change)
