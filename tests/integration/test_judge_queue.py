"""The judge queue under load, on the real broker and Redis: jobs are
taken from Kafka only while the judge has a call slot (the rest wait there, counted as lag, not
shed), the consumer stays in its group while it waits, a tokens-per-minute limit shared
through Redis and corrected to the reported usage, and a judging worker ready only once its
judge consumer is assigned."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, ConsumerRecord

from tests.fake_llm import FakeLLM, tool_call_reply, verdict
from tests.integration.harness import WorkerProcess, create_topic, produce, worker_env
from tests.realservices import free_port
from tests.test_llm_judge import client_for
from tracejudge.judges.llm.client import JudgeError
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.streams.judge import consumer as judge_consumer
from tracejudge.streams.judge.consumer import JudgeRunner
from tracejudge.streams.judge.rate_limit import SharedTokenLimiter
from tracejudge.streams.judge.stage import JOB_HEADROOM, JudgeStage
from tracejudge.streams.kafka.security import client_options
from tracejudge.streams.kafka.status import WorkerStatus, collect_status, render_status

pytestmark = pytest.mark.integration


def judge_settings(kafka: str, **overrides: Any) -> Settings:
    unique = f"it-jq-{uuid.uuid4().hex[:6]}"
    return Settings(
        kafka_bootstrap=kafka,
        app_id=unique,
        topic_prefix=f"{unique}.",
        llm_base_url="http://127.0.0.1:9/v1",  # never called here
        llm_concurrency=4,
        broker_session_timeout_s=10,
        **overrides,
    )


async def jobs_in(settings: Settings, count: int, partitions: int = 1) -> str:
    topic = settings.topic(names.JUDGE_REQUESTS)
    await create_topic(settings.kafka_bootstrap, topic, partitions)
    await produce(
        settings.kafka_bootstrap, topic, [(None, f"job-{i}".encode()) for i in range(count)]
    )
    return topic


class Blocked:
    """A handler whose jobs wait until released: what a slow model looks like to the runner."""

    def __init__(self) -> None:
        self.started: list[ConsumerRecord] = []
        self.release = asyncio.Event()

    async def __call__(self, record: ConsumerRecord) -> None:
        self.started.append(record)
        await self.release.wait()


async def until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_jobs_are_taken_only_while_the_judge_has_call_slots_and_the_rest_are_lag(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(judge_consumer, "LAG_INTERVAL_S", 0.2)
    settings = judge_settings(kafka_bootstrap)
    produced_at = time.time()
    topic = await jobs_in(settings, 20)
    stage = JudgeStage(settings, None, Policy(), "v")
    for _ in range(20):  # a server pushing back: the adaptive limit comes down to one call
        stage.client.limit.on_pushback()
    assert stage.client.limit.slots == 1
    handler = Blocked()
    runner = JudgeRunner(settings, topic, handler, stage.room)
    running = asyncio.create_task(runner.run())
    try:
        await until(lambda: len(handler.started) >= 1 + JOB_HEADROOM, 60, "no job taken")
        await until(lambda: runner.queue_lag == 20, 10, f"lag {runner.queue_lag}")
        await asyncio.sleep(1.0)  # time for more fetches, were the runner to take more
        # one call slot plus the headroom taken; before, 2 x concurrency (8) queued locally
        assert len(handler.started) == 1 + JOB_HEADROOM
        assert runner.queue_lag == 20  # the 17 waiting in Kafka and the 3 being judged
        age = runner.oldest_age()
        assert 1.0 <= age <= time.time() - produced_at + 1.0, age
        # the server answers again: the limit grows back, and so does what is taken
        stage.client.limit.current = float(stage.client.limit.maximum)
        await until(
            lambda: len(handler.started) == stage.client.limit.maximum + JOB_HEADROOM, 10, "more"
        )
        handler.release.set()
        await until(lambda: len(handler.started) == 20, 30, "not all jobs taken")
        await until(lambda: runner.queue_lag == 0, 15, f"lag stays {runner.queue_lag}")
        assert runner.oldest_age() == 0.0
        assert [r.offset for r in handler.started] == list(range(20))
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


class ShortPoll(JudgeRunner):
    """The runner with a max poll interval short enough to pass in a test."""

    revocations = 0

    def _consumer(self) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            self.topic,
            **client_options(self.settings),
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
            max_poll_interval_ms=3_000,
        )

    async def _drain(self, revoked: Any, consumer: AIOKafkaConsumer) -> None:
        if revoked:
            ShortPoll.revocations += 1
        await super()._drain(revoked, consumer)


async def test_a_runner_without_room_stays_in_its_group_past_the_max_poll_interval(
    kafka_bootstrap: str,
) -> None:
    settings = judge_settings(kafka_bootstrap)
    topic = await jobs_in(settings, 6)
    handler = Blocked()
    runner = ShortPoll(settings, topic, handler, lambda unfinished: 2 - unfinished)
    running = asyncio.create_task(runner.run())
    try:
        await until(lambda: len(handler.started) == 2, 60, "no job taken")
        await asyncio.sleep(7.0)  # twice the max poll interval with every slot taken
        assert ShortPoll.revocations == 0  # not thrown out of the group for not polling
        assert len(handler.started) == 2
        handler.release.set()
        await until(lambda: len(handler.started) == 6, 30, "the rest not taken")
        # nothing taken twice: the jobs a pause dropped from the fetch buffer came once
        assert [r.offset for r in handler.started] == list(range(6))
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


# -- tokens per minute, shared through Redis --------------------------------------------------


def pinned(second: float) -> Any:
    """A clock at `second` of a minute, running on from there."""
    offset = (second - time.time() % 60) % 60
    return lambda: time.time() + offset


async def test_two_workers_share_one_token_budget_corrected_to_what_was_spent(
    redis_url: str,
) -> None:
    client = aioredis.from_url(redis_url)
    prefix = f"tracejudge:test-{uuid.uuid4().hex[:6]}"
    clock = pinned(10.0)  # 50 s from the next minute: no boundary inside the test
    a, b = (SharedTokenLimiter(client, 1000, prefix, clock) for _ in range(2))
    loop = asyncio.get_running_loop()
    try:
        first = await a.reserve(600, loop.time() + 0.2)
        assert first is not None
        assert await b.reserve(600, loop.time() + 0.2) is None  # would wait past its deadline
        await a.settle(first, 100)  # the server reported 100: 500 given back
        second = await b.reserve(600, loop.time() + 0.2)
        assert second is not None
        key = f"{prefix}:tpm:{first.minute}"
        assert int(await client.get(key) or 0) == 700
        # a call larger than the whole limit goes alone in its minute, never never
        fresh = SharedTokenLimiter(client, 1000, prefix + "-big", clock)
        assert await fresh.reserve(5000, loop.time() + 0.2) is not None
    finally:
        await client.aclose()


async def test_a_spent_minute_makes_the_call_wait_for_the_next_not_fail(redis_url: str) -> None:
    client = aioredis.from_url(redis_url)
    prefix = f"tracejudge:test-{uuid.uuid4().hex[:6]}"
    limiter = SharedTokenLimiter(client, 1000, prefix, pinned(58.5))
    loop = asyncio.get_running_loop()
    try:
        assert await limiter.reserve(900, loop.time() + 0.2) is not None
        started = loop.time()
        later = await limiter.reserve(900, loop.time() + 10)
        assert later is not None and limiter.waits == 1
        assert 0.5 < loop.time() - started < 5
    finally:
        await client.aclose()


async def test_redis_down_keeps_a_fair_share_of_the_tokens() -> None:
    down = aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.2)
    limiter = SharedTokenLimiter(down, 1000, clock=pinned(10.0))
    limiter.workers_seen = 2  # as last seen while Redis was up
    loop = asyncio.get_running_loop()
    try:
        assert await limiter.reserve(300, loop.time() + 0.1) is not None
        assert await limiter.reserve(300, loop.time() + 0.1) is None  # 600 > a share of 500
        assert limiter.redis_failures > 0
    finally:
        await down.aclose()


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


async def test_the_client_counts_the_tokens_the_server_reported(
    redis_url: str, fake: FakeLLM
) -> None:
    """Each answer reports 100 + 20 tokens (`fake_llm.completion`): the minute's count is that,
    not the estimate reserved before the call; a 429 without usage counts nothing."""
    client = aioredis.from_url(redis_url)
    prefix = f"tracejudge:test-{uuid.uuid4().hex[:6]}"
    # one clock for the limiter and the test: two made apart fall in different minutes when
    # the real clock passes second 10 between them
    clock = pinned(10.0)
    tokens = SharedTokenLimiter(client, 1_000_000, prefix, clock)
    fake.script = lambda body, n: (
        tool_call_reply(verdict(True, False)) if n % 2 == 0 else _too_many()
    )
    llm = client_for(fake.base_url)
    llm.tokens = tokens
    try:
        started = int(clock() // 60)
        for _ in range(3):
            await llm.judge("x" * 3000)  # estimated at >= 1,000 tokens + the answer's 1,024
        minute = int(clock() // 60)
        assert minute == started  # the calls took under 50 s: one minute's count
        assert int(await client.get(f"{prefix}:tpm:{minute}") or 0) == 3 * 120
    finally:
        await llm.aclose()
        await client.aclose()


def _too_many() -> Any:
    from tests.fake_llm import Reply

    return Reply(status=429, body={"error": {"message": "slow down"}}, headers={"retry-after": "0"})


async def test_tokens_spent_past_the_queue_wait_are_a_budget_fallback(
    redis_url: str, fake: FakeLLM
) -> None:
    client = aioredis.from_url(redis_url)
    prefix = f"tracejudge:test-{uuid.uuid4().hex[:6]}"
    clock = pinned(10.0)  # one clock for the limiter and the test (see above)
    tokens = SharedTokenLimiter(client, 2000, prefix, clock)
    fake.script = lambda body, n: tool_call_reply(verdict(True, False))
    llm = client_for(fake.base_url, queue_wait_s=0.3)
    llm.tokens = tokens
    try:
        minute = int(clock() // 60)
        await client.set(f"{prefix}:tpm:{minute}", 1500)  # other workers spent most of it
        with pytest.raises(JudgeError) as failed:
            await llm.judge("x" * 3000)
        assert failed.value.code == "budget" and fake.count() == 0
    finally:
        await llm.aclose()
        await client.aclose()


# -- readiness of a judging worker ------------------------------------------------------------


def hold_the_group(
    bootstrap: str, group: str, topic: str, joined: threading.Event, release: threading.Event
) -> None:
    """A member of the judge group whose loop stops after it joined: a rebalance waits for it
    (up to its rebalance timeout), so a judge consumer joining meanwhile is not assigned."""

    async def main() -> None:
        member = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            session_timeout_ms=120_000,
            heartbeat_interval_ms=3_000,
            rebalance_timeout_ms=120_000,
            max_poll_interval_ms=120_000,
        )
        await member.start()
        try:
            deadline = time.monotonic() + 60
            while not member.assignment() and time.monotonic() < deadline:
                await member.getmany(timeout_ms=200)
            joined.set()
            release.wait(timeout=90)  # blocks this thread's loop: no heartbeat, no rejoin
        finally:
            await member.stop()

    asyncio.run(main())


def test_a_judging_worker_is_ready_only_once_its_judge_consumer_is_assigned(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, fake: FakeLLM
) -> None:
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        tmp_path,
        "judge-ready",
        llm_judge_enabled="true",
        llm_base_url=fake.base_url,
        llm_model="scripted-judge",
        worker_judges="true",
    )
    worker = WorkerProcess(env, tmp_path / "worker.log")
    settings = worker.settings
    topic = settings.topic(names.JUDGE_REQUESTS)
    asyncio.run(create_topic(kafka_bootstrap, topic, 3))
    joined, release = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=hold_the_group,
        args=(
            kafka_bootstrap,
            f"{settings.app_id}{names.JUDGE_GROUP_SUFFIX}",
            topic,
            joined,
            release,
        ),
        daemon=True,
    )
    holder.start()
    try:
        assert joined.wait(60), "the holding member did not join"
        worker.start(wait=False)
        deadline = time.monotonic() + 90
        code, body = worker.health()
        # the input side ready (assigned, tables recovered), the judge consumer still waiting
        while not (body.get("assigned") and body.get("recovered")):
            assert time.monotonic() < deadline, worker.tail()
            assert code != 200, body  # never ready before its judge consumer
            time.sleep(0.1)
            code, body = worker.health()
        for _ in range(20):  # two seconds more of it
            code, body = worker.health()
            assert code == 503, body
            assert body["waiting_for"] == ["judge consumer assigned"], body
            assert body["judge"]["assigned"] is False
            time.sleep(0.1)
        release.set()
        body = worker.wait_healthy(90)
        assert body["judge"]["assigned"] is True and "waiting_for" not in body
    finally:
        release.set()
        worker.stop()
        holder.join(timeout=30)


async def test_status_shows_the_judge_queue(kafka_bootstrap: str) -> None:
    settings = judge_settings(kafka_bootstrap)
    await jobs_in(settings, 5, partitions=2)
    status = await collect_status(settings, [], timeout_s=30)
    assert status.judge_waiting == 5  # the judge group has committed nothing
    assert "judge queue: 5 jobs waiting or being judged, oldest unknown" in render_status(status)
    judging = WorkerStatus("http://127.0.0.1:1", 200, "ok", {}, {"oldest_job_age_s": 42.4})
    shown = render_status(dataclasses.replace(status, workers=[judging]))
    assert "judge queue: 5 jobs waiting or being judged, oldest 42s" in shown
