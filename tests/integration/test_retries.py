"""Generic and clarification-only answers on the real broker: exactly the expected retries."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import WorkerProcess, grouped, produce, worker_env
from tests.realservices import ROOT

pytestmark = pytest.mark.integration


def response(session: str, prompt: str, answer: str, attempt: int = 0) -> tuple[bytes, bytes]:
    value = {
        "type": "model_response",
        "session_id": session,
        "request_id": f"req-{session}",
        "agent": "cli-agent",
        "prompt": prompt,
        "response": answer,
        "attempt": attempt,
    }
    return session.encode(), json.dumps(value, ensure_ascii=False).encode()


async def outputs(
    worker: WorkerProcess, topic: str, sessions: set[str], settle_s: float = 3.0
) -> dict[str, list[dict[str, Any]]]:
    return await grouped(
        worker, topic, sessions, field="session_id", timeout_s=30, settle_s=settle_s
    )


async def test_retries_exhaustion_duplicates_and_a_restart(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:6]
    hello, vague_ok, task, zh, opener = (
        f"{n}-{run}" for n in ("hello", "ready", "task", "zh", "opener")
    )
    first = [
        response(hello, "hello", "How can I help you?"),  # right answer: no retry
        response(vague_ok, "hello", "Ready to assist"),  # filler: retry
        response(task, "analyze this repo", "Could you clarify?"),  # question: retry
        response(zh, "分析这个项目的结构", "有什么可以帮您？"),  # question to a task: retry
        response(opener, "debug this", "I can see this is...\n\nLet me analyze..."),  # work
    ]
    env = worker_env(kafka_bootstrap, redis_url, tmp_path, "retries", generic_max_retries=1)
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    sessions = {hello, vague_ok, task, zh, opener}
    try:
        await produce(kafka_bootstrap, worker.topic("responses"), first)
        retries = await outputs(worker, "retries", sessions)
        assert [len(retries[s]) for s in (hello, vague_ok, task, zh, opener)] == [0, 1, 1, 1, 0]
        [task_retry] = retries[task]
        assert task_retry["type"] == "retry_request" and task_retry["attempt"] == 1
        assert task_retry["response_type"] == "clarification"
        assert task_retry["detected_pattern"] == "could you clarify"
        assert task_retry["continue_prompt"].startswith("Please continue")
        assert retries[zh][0]["continue_prompt"] == "继续"
        assert retries[vague_ok][0]["response_type"] == "generic"

        # the retried task answers with filler again: the limit is reached
        second = [response(task, "analyze this repo", "Ready to assist", attempt=1)]
        await produce(kafka_bootstrap, worker.topic("responses"), second + first[2:3])
        worker.kill9()  # bookkeeping must survive a crash...
        worker.start()
        # ...and duplicates delivered after it change nothing
        await produce(kafka_bootstrap, worker.topic("responses"), first + second)
        for _ in range(10):  # as a supervisor would: a worker the stall watchdog stopped restarts
            retries = await outputs(worker, "retries", sessions)
            if any(r["type"] == "retry_exhausted" for r in retries[task]):
                break
            worker.restart_if_exited()
            await asyncio.sleep(5)
        alerts = await outputs(worker, "alerts", sessions)
        tailed = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-m",
                "tracejudge.streams.cli",
                "tail",
                "retries",
                "--from-beginning",
                "--idle-exit",
                "3",
            ],
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        worker.stop()
    by_id = {s: {r["retry_id"] for r in retries[s]} for s in sessions}
    assert [len(by_id[s]) for s in (hello, vague_ok, task, zh, opener)] == [0, 1, 2, 1, 0]
    kinds = sorted({(r["retry_id"], r["type"]) for r in retries[task]}, key=lambda x: x[1])
    assert [k for _, k in kinds] == ["retry_exhausted", "retry_request"]
    exhausted = next(r for r in retries[task] if r["type"] == "retry_exhausted")
    assert exhausted["attempt"] == 1 and exhausted["continue_prompt"] is None
    exhausted_alerts = {a["alert_id"] for a in alerts[task] if a["kind"] == "retries_exhausted"}
    assert len(exhausted_alerts) == 1
    assert not any(alerts[s] for s in (hello, vague_ok, zh, opener))
    lines = [line for line in tailed.stdout.splitlines() if task in line]
    assert any("retry_request attempt=1 clarification" in line for line in lines), tailed.stdout
    assert any("retry_exhausted attempt=1 generic" in line for line in lines)
