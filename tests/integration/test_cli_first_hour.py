"""`publish` and `tail` as a new user meets them, on the real broker and without a worker: a
file with bad lines sends nothing, a topic that does not exist is said so, a tail says what it
waits for."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.cli import clean_env, run_cli
from tests.integration.harness import create_topic

pytestmark = pytest.mark.integration
PARTITIONS = 2  # of the topics made here; `records_in` counts them all


@pytest.fixture
def env(kafka_bootstrap: str) -> Iterator[dict[str, str]]:
    prefix = f"it-first-{uuid.uuid4().hex[:6]}."
    yield clean_env(TRACEJUDGE_KAFKA_BOOTSTRAP=kafka_bootstrap, TRACEJUDGE_TOPIC_PREFIX=prefix)


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=env)


async def records_in(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()


GOOD = [
    {"type": "task_started", "request_id": "first-1", "goal": "refund order 7"},
    {"type": "final_response", "request_id": "first-1", "step_index": 1, "output": "refunded"},
]
BAD = [
    "{not json",
    '{"type": "tool_call", "request_id": "first-1", "step_index": 2, "tool": "x", "succ',
    json.dumps({"type": "final_response", "request_id": "first-2", "text": "done"}),
]


async def test_publish_sends_nothing_from_a_file_with_bad_lines(
    env: dict[str, str], kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = env["TRACEJUDGE_TOPIC_PREFIX"] + "events"
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(e) for e in GOOD) + "\n")
    no_topic = cli(env, "publish", str(good))  # one line, not a minute of retries
    assert no_topic.returncode == 1 and no_topic.stderr.count("\n") == 1, no_topic.stderr
    assert f"topic {topic} does not exist" in no_topic.stderr

    await create_topic(kafka_bootstrap, topic, PARTITIONS)
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([json.dumps(GOOD[0]), *BAD, json.dumps(GOOD[1])]) + "\n")

    refused = cli(env, "publish", str(path))
    assert refused.returncode == 1, refused.stderr
    problems = [line for line in refused.stderr.splitlines() if line.startswith("tracejudge: line")]
    assert [p.split(":")[1].strip() for p in problems] == ["line 2", "line 3", "line 4"]
    assert "not_json" in problems[0] and "output" in problems[2] and "text" in problems[2]
    assert "nothing sent" in refused.stderr
    assert await records_in(kafka_bootstrap, topic) == 0

    skipping = cli(env, "publish", str(path), "--skip-invalid")
    assert skipping.returncode == 0, skipping.stderr
    assert f"sent 2 events to {topic}" in skipping.stdout
    assert "skipped 3 invalid lines: 2-4" in skipping.stderr
    assert await records_in(kafka_bootstrap, topic) == 2

    sent = cli(env, "publish", str(good))
    assert sent.returncode == 0 and sent.stderr == "", sent.stderr
    assert await records_in(kafka_bootstrap, topic) == 4


async def test_tail_says_what_it_waits_for_and_when_the_topic_is_missing(
    env: dict[str, str], kafka_bootstrap: str
) -> None:
    topic = env["TRACEJUDGE_TOPIC_PREFIX"] + "evaluations"
    missing = cli(env, "tail", "evaluations", "--idle-exit", "1")
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1 and topic in missing.stderr
    assert "does not exist" in missing.stderr and kafka_bootstrap in missing.stderr

    await create_topic(kafka_bootstrap, topic, PARTITIONS)
    waiting = cli(env, "tail", "evaluations", "--idle-exit", "1")
    assert waiting.returncode == 0, waiting.stderr
    assert waiting.stdout == ""  # the hint is on stderr, never among the events
    assert topic in waiting.stderr and "Ctrl-C" in waiting.stderr
