"""The explorer's reader on the real broker: it waits for topics that do not exist yet, reads
back only `TRACEJUDGE_UI_LOOK_BACK_S`, counts a request's alerts, and follows new verdicts."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from tests.integration.browser import explorer, wait_until
from tests.realservices import start_kafka
from tests.test_explorer import judged
from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.streams.kafka.admin import ensure_topics

pytestmark = pytest.mark.integration


def page(base: str, path: str = "/") -> str:
    with urllib.request.urlopen(f"{base}{path}", timeout=10) as resp:
        return str(resp.read().decode())


async def send(settings: Settings, kind: str, value: dict[str, object], age_s: float = 0) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.topic(kind),
            json.dumps(value).encode(),
            key=str(value["request_id"]).encode(),
            timestamp_ms=int((time.time() - age_s) * 1000),
        )
    finally:
        await producer.stop()


def setup(kafka_bootstrap: str) -> tuple[Settings, dict[str, str]]:
    env = {
        "TRACEJUDGE_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TRACEJUDGE_TOPIC_PREFIX": f"feed-{uuid.uuid4().hex[:6]}.",
        "TRACEJUDGE_REDIS_URL": "",
        "TRACEJUDGE_UI_LOOK_BACK_S": "3600",
    }
    settings = Settings.model_validate({k[len("TRACEJUDGE_") :].lower(): v for k, v in env.items()})
    return settings, env


def test_only_the_look_back_is_read_and_alerts_are_counted(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings, env = setup(kafka_bootstrap)
    asyncio.run(ensure_topics(settings))
    old, _, _ = judged("old-request", fail=True)
    recent, _, _ = judged("recent-request", fail=True)
    asyncio.run(send(settings, names.EVALUATIONS, old, age_s=2 * 3600))
    asyncio.run(send(settings, names.EVALUATIONS, recent))
    asyncio.run(send(settings, names.ALERTS, {"request_id": "recent-request", "kind": "low"}))
    with explorer(env, tmp_path / "explorer.log") as base:
        wait_until(lambda: "recent-request" in page(base), 60, lambda: page(base))
        wait_until(lambda: 'class="num">1</td>' in page(base), 30, lambda: page(base))
        listed = page(base)
        assert listed.count('class="verdict"') == 1 and "old-request" not in listed


def test_it_waits_for_the_topics_and_follows_new_verdicts(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings, env = setup(kafka_bootstrap)
    with explorer(env, tmp_path / "explorer.log") as base:
        assert 'class="verdict"' not in page(base)  # no topics yet: an empty page, no error
        asyncio.run(ensure_topics(settings))
        for i in range(3):
            asyncio.run(send(settings, names.EVALUATIONS, judged(f"new-{i}", fail=i == 0)[0]))
        wait_until(lambda: page(base).count('class="verdict"') == 3, 60, lambda: page(base))
        assert "new-0" in page(base, "/?passed=no") and "new-1" not in page(base, "/?passed=no")


def test_it_rides_out_a_broker_outage(tmp_path: Path) -> None:
    kafka = start_kafka(tmp_path / "kafka", reuse=False)
    try:
        settings, env = setup(kafka.address)
        asyncio.run(ensure_topics(settings))
        asyncio.run(send(settings, names.EVALUATIONS, judged("before", fail=True)[0]))
        with explorer(env, tmp_path / "explorer.log") as base:
            wait_until(lambda: "before" in page(base), 60, lambda: page(base))
            log = tmp_path / "explorer.log"
            lines_before = len(log.read_text(errors="replace").splitlines())
            kafka.kill9()
            time.sleep(10)  # pages keep answering from memory while the broker is away
            assert "before" in page(base)
            during = log.read_text(errors="replace").splitlines()[lines_before:]
            assert len(during) <= 30, "\n".join(during[-40:])  # aiokafka's retries, quieted
            kafka.restart()
            asyncio.run(send(settings, names.EVALUATIONS, judged("after", fail=False)[0]))
            wait_until(lambda: "after" in page(base), 90, lambda: log.read_text(errors="replace"))
            assert page(base).count('class="verdict"') == 2
    finally:
        kafka.stop()


def test_a_record_it_cannot_read_is_skipped_and_counted(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Anyone who can write to the evaluations topic can write a bad record: the verdicts
    after it on its partition still appear, and /health counts it."""
    settings, env = setup(kafka_bootstrap)
    asyncio.run(ensure_topics(settings))
    before, _, _ = judged("same-key", fail=True)
    bad = {**before, "overall_score": "not-a-number"}
    after = {**judged("same-key", fail=False)[0], "request_id": "same-key"}
    for value in (before, bad, after):  # one key: one partition, in this order
        asyncio.run(send(settings, names.EVALUATIONS, value))
    asyncio.run(send(settings, names.EVALUATIONS, {**bad, "request_id": "other-key"}))
    with explorer(env, tmp_path / "explorer.log") as base:

        def health() -> dict[str, object]:
            with urllib.request.urlopen(f"{base}/health", timeout=10) as resp:
                return dict(json.loads(resp.read()))

        wait_until(lambda: health()["unreadable"] == 2, 60, lambda: str(health()))
        wait_until(lambda: "same-key" in page(base, "/?passed=yes"), 30, lambda: page(base))
        assert health()["read"] == 2 and "other-key" not in page(base)
