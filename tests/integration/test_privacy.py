"""Nothing sensitive leaves the worker unmasked, end to end on the real broker and Redis.

One request per kind of secret or personal data (every kind the masker covers, taken from the
labelled corpus), with the value in every text field of every event type, in model responses,
in a dead-lettered event, and in the answer of a (scripted) judge that quotes it. Then every
output topic, every Redis value, the worker's log and the bodies sent to the judge are searched
for the raw value (and its JSON-escaped form).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.fake_llm import FakeLLM, data_block, tool_call_reply, verdict
from tests.integration.harness import (
    WorkerProcess,
    consume,
    produce,
    produce_events,
    wait_counter,
    worker_env,
)
from tracejudge.models import names

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).resolve().parents[1] / "data" / "redaction_corpus.jsonl"
TOPICS = (names.EVALUATIONS, names.REFLECTIONS, names.ALERTS, names.CONTROL, names.RETRIES)


def one_per_kind() -> dict[str, tuple[str, str]]:
    """kind -> (text that carries it, the raw value)."""
    found: dict[str, tuple[str, str]] = {}
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["secrets"] and item["kind"] not in found:
            found[item["kind"]] = (item["text"], item["secrets"][0])
    return found


def events_carrying(rid: str, text: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "task_started",
            "request_id": rid,
            "goal": f"Fix the account: {text}",
            "planned_steps": [f"look up {text}", "update"],
        },
        {"type": "user_message", "request_id": rid, "step_index": 1, "text": text},
        {
            "type": "reasoning_step",
            "request_id": rid,
            "step_index": 2,
            "phase": "plan",
            "intent_summary": f"use {text}",
            "observation_summary": text,
            "error": text,
        },
        {
            "type": "tool_call",
            "request_id": rid,
            "step_index": 3,
            "tool": "lookup",
            "success": False,
            "args_summary": text,
            "result_preview": text,
            "error": f"denied {text}",
        },
        {
            "type": "iteration",
            "request_id": rid,
            "step_index": 4,
            "iteration": 1,
            "max_iterations": 3,
            "response": f"trying {text}",
            "observation": f"error: {text}",
        },
        {
            "type": "iteration",
            "request_id": rid,
            "step_index": 5,
            "iteration": 2,
            "max_iterations": 3,
            "response": f"<Conclusion>It was {text}</Conclusion>",
            "observation": f"saved successfully {text}",
            "exec_success": True,
        },
        {"type": "final_response", "request_id": rid, "output": f"Could not finish; {text}"},
    ]


def model_response(session: str, text: str) -> tuple[bytes, bytes]:
    value = {
        "type": "model_response",
        "session_id": session,
        "prompt": f"analyze {text}",
        "response": f"Could you clarify what you mean by {text}?",
    }
    return session.encode(), json.dumps(value).encode()


def forms(raw: str) -> set[str]:
    """The raw value as it would appear in text, in JSON, or in JSON with ASCII escapes."""
    return {raw, json.dumps(raw)[1:-1], json.dumps(raw, ensure_ascii=False)[1:-1]}


def leaks(haystack: str, secrets: dict[str, str]) -> list[str]:
    return [kind for kind, raw in secrets.items() if any(f in haystack for f in forms(raw))]


def http_status(worker: WorkerProcess, path: str) -> int:
    url = f"http://127.0.0.1:{worker.settings.web_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_debug_pages_only_when_asked_for(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, redis_url, tmp_path, "debug", debug_endpoints="true")
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        assert http_status(worker, "/debug/tasks") == 200
        assert http_status(worker, "/health") == 200
    finally:
        worker.stop()


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


async def test_no_raw_secret_in_any_output_redis_log_or_judge_body(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, fake: FakeLLM
) -> None:
    run = uuid.uuid4().hex[:6]
    carried = one_per_kind()
    secrets = {kind: raw for kind, (_, raw) in carried.items()}
    rids = {f"priv-{run}-{kind}": kind for kind in carried}

    def quoting_judge(body: dict[str, Any], n: int) -> Any:
        # a model that quotes the raw value back (as if it had seen it): still masked out
        kind = rids[json.loads(data_block(body))["request_id"]]
        return tool_call_reply(
            verdict(
                False,
                True,
                30,
                summary=f"the agent printed {carried[kind][0]}",
                remaining_steps=[f"rotate {carried[kind][0]}"],
            )
        )

    fake.script = quoting_judge
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        tmp_path,
        "privacy",
        dlq_payload="mask",
        llm_judge_enabled="true",
        llm_base_url=fake.base_url,
        llm_api_key="sk-test-judgekey",
        llm_model="scripted-judge",
        llm_timeout_s=10,
        min_iterations=1,
    )
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        # pages that show coroutine stacks or table data (whole traces) are off by default
        for path in ("/debug/tasks", "/table/", "/router/", "/stats/"):
            assert http_status(worker, path) == 404, path
        bootstrap, events = kafka_bootstrap, worker.topic(names.EVENTS)
        await produce_events(
            bootstrap,
            events,
            [e for rid, k in rids.items() for e in events_carrying(rid, carried[k][0])],
        )
        await produce(
            bootstrap,
            worker.topic(names.RESPONSES),
            [model_response(f"s-{rid}", carried[k][0]) for rid, k in rids.items()],
        )
        broken = [
            json.dumps(
                {
                    "type": "tool_call",
                    "request_id": rid,
                    "step_index": "x",
                    "args_summary": carried[k][0],
                }
            ).encode()
            for rid, k in rids.items()
        ]
        await produce(
            bootstrap, events, [(rid.encode(), b) for rid, b in zip(rids, broken, strict=True)]
        )
        await wait_counter(worker, len(rids), "evaluations", timeout_s=120)
        await wait_counter(worker, len(rids), "dead_lettered", timeout_s=30)
        outputs: dict[str, list[bytes]] = {}
        for topic in (*TOPICS, names.JUDGE_REQUESTS, names.DLQ):
            records = await consume(
                bootstrap, worker.topic(topic), until=lambda r: False, timeout_s=3
            )
            outputs[topic] = [r.value or b"" for r in records]
    finally:
        worker.stop()

    # the test reaches what it claims to: each kind of output was produced
    for topic in (*TOPICS, names.JUDGE_REQUESTS, names.DLQ):
        assert outputs[topic], f"nothing on {topic}"
    assert fake.count() >= len(rids)
    found = {
        topic: leaks("\n".join(v.decode("utf-8", "replace") for v in values), secrets)
        for topic, values in outputs.items()
    }
    assert all(not kinds for kinds in found.values()), found
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stored = "\n".join(
        str(client.get(key) or "")
        for key in client.scan_iter("tracejudge:*")
        if client.type(key) == "string"
    )
    assert f"priv-{run}" in stored  # this run's verdicts are there
    assert leaks(stored, secrets) == []
    assert leaks((tmp_path / "worker.log").read_text(errors="replace"), secrets) == []
    assert "sk-test-judgekey" not in (tmp_path / "worker.log").read_text(errors="replace")
    assert leaks(json.dumps(fake.requests), secrets) == []
