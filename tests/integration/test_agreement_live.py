"""Outcomes joined to verdicts by a real worker on the real broker and Redis, across a kill -9:
the labelled tau-bench airline runs published as events, then an outcome from each run's label
once its final verdict is out; the worker killed with -9 while it takes the outcomes, and
restarted. The tally in Redis must be what the test computes offline from the same final
evaluations and labels: each outcome counted once, none lost."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.harness import (
    WorkerProcess,
    consume,
    grouped,
    key_value_lines,
    produce,
    produce_events,
    wait_counter,
    worker_env,
)
from tracejudge.judges.agreement.tally import Tally, Truth, cells, kept_of, label_ok
from tracejudge.models.outputs import Evaluation
from tracejudge.streams.agreement.store import RedisAgreementStore, keys_of

pytestmark = pytest.mark.integration


def outcomes(labels: dict[str, Any], rids: list[str]) -> list[dict[str, Any]]:
    now = time.time()
    return [
        {
            "type": "outcome",
            "request_id": rid,
            "ok": label_ok(labels[rid]),
            "source": "test",
            "ts": now,
        }
        for rid in rids
    ]


async def unacknowledged(bootstrap: str, group: str, topic: str, rids: list[str]) -> int:
    """How many of the outcomes of `rids` lie at or past the group's committed offsets: those a
    worker killed now had not acknowledged, and its successor must take again."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    wanted, count = set(rids), 0
    for record in await consume(bootstrap, topic, until=None):
        value = json.loads(record.value)
        if value.get("type") == "outcome" and value.get("request_id") in wanted:
            at = committed.get(TopicPartition(topic, record.partition))
            count += at is None or record.offset >= at.offset
    return count


async def pairs_counted(store: RedisAgreementStore) -> int:
    return sum(n for c, n in (await store.tally()).counts.items() if c.view == "rules")


async def test_agreement_across_a_kill_equals_the_offline_figures(
    kafka_bootstrap: str, redis_url: str, tau_events: Path, tmp_path: Path
) -> None:
    labels: dict[str, Any] = json.loads((tau_events.parent / "labels.json").read_text())
    rids = sorted(labels)
    assert len(rids) == 40
    worker = WorkerProcess(
        worker_env(kafka_bootstrap, redis_url, tmp_path, "agree"), tmp_path / "worker.log"
    ).start()
    redis = aioredis.from_url(redis_url)
    store = RedisAgreementStore(redis, 7 * 86400, prefix=keys_of(worker.settings.topic_prefix))
    try:
        await produce(kafka_bootstrap, worker.topic("events"), key_value_lines(tau_events))
        finals = await grouped(worker, "evaluations", set(rids), wait_for_all=True, timeout_s=120)
        assert all(finals.values()), "a run without its final verdict"
        # half of the outcomes, taken; then the rest, and the worker killed as it takes them
        first, rest = outcomes(labels, rids[:20]), outcomes(labels, rids[20:])
        await produce_events(kafka_bootstrap, worker.topic("events"), first)
        await wait_counter(worker, 20, "outcomes_joined", timeout_s=60)
        await produce_events(kafka_bootstrap, worker.topic("events"), rest)
        await asyncio.sleep(0.05)
        worker.kill9()
        # how many it had not acknowledged: usually all 20, fewer when a commit fell in the
        # 50 ms (more often on a busy machine)
        again = await unacknowledged(
            kafka_bootstrap, worker.settings.app_id, worker.topic("events"), rids[20:]
        )
        worker.start()
        for _ in range(450):  # 90 s at most
            if await pairs_counted(store) >= 40:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)  # anything counted twice would show by now
        live = await store.tally()
        health = worker.health()[1]
    finally:
        worker.stop()
        await redis.aclose()
    # offline: the same final evaluations (the last of each request: a verdict published
    # again after the kill is the same verdict) and the same labels
    offline = Tally()
    for rid in rids:
        evaluation = Evaluation.model_validate(finals[rid][-1])
        ok = label_ok(labels[rid])
        assert ok is not None
        offline.add(cells(kept_of(evaluation), Truth(ok, "test")))
    assert live.counts == offline.counts  # counts exact: none twice, none lost
    got, want = live.figures(), offline.figures()
    assert (got.runs, got.ok_runs, got.failed_runs) == (40, 20, 20)
    assert got.auc is not None and want.auc is not None
    assert abs(got.auc - want.auc) <= 0.005
    assert got.ok_alerted == want.ok_alerted and got.failed_flagged == want.failed_flagged
    # the restarted worker took what the killed one had not acknowledged, as joined or same
    counters = health.get("counters", {})
    assert counters.get("outcomes_unmatched", 0) == 0 and counters.get("outcomes_early", 0) == 0
    # what the killed worker had not acknowledged came again to the new process
    taken_again = counters.get("outcomes_joined", 0) + counters.get("outcomes_same", 0)
    assert taken_again >= again, (counters, again)
