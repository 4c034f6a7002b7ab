"""Two workers under steady traffic; one is killed -9 and restarted, five times over.

Faust can resume fetching before it seeks to the committed offsets after a rebalance
(faust-streaming #216, #221): records skipped that way used to be judged only after the next
rebalance, or wrongly closed by the idle timer. Every request must be judged by its
final_response, soon once the group is stable, once (one evaluation_id), and the group's
commits must reach the log end, also when the rebalance comes as the traffic ends and no later
record shows the hole.

A worker that exits on its own (its watchdog's way out of a stall) is started again, as its
supervisor would.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.integration.harness import WorkerProcess, consume, refund_request, worker_env
from tests.realservices import free_port
from tests.soak import runs

pytestmark = pytest.mark.integration

CYCLES = 5
PARTITIONS = 6
REQUESTS_PER_S = 8
LATE_S = 20.0


async def traffic(bootstrap: str, topic: str, run: str, stop: asyncio.Event) -> dict[str, float]:
    """Requests at a steady rate, each event a moment after the last; final_response times."""
    finals: dict[str, float] = {}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        n = 0
        while not stop.is_set():
            rids = [f"{run}-{n + i}" for i in range(REQUESTS_PER_S)]
            n += REQUESTS_PER_S
            for step in range(4):
                for rid in rids:
                    event = refund_request(rid)[step]
                    await producer.send(topic, key=rid.encode(), value=json.dumps(event).encode())
                await producer.flush()
                if step == 3:
                    now = time.time()
                    finals.update({rid: now for rid in rids})
                await asyncio.sleep(0.25)
    finally:
        await producer.stop()
    return finals


async def commits_reach_the_end(
    bootstrap: str, group: str, topic: str, timeout_s: float
) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        deadline = time.monotonic() + timeout_s
        while True:
            ends = await consumer.end_offsets(tps)
            committed = {tp: await consumer.committed(tp) for tp in tps}
            behind = {tp.partition: ends[tp] - (committed[tp] or 0) for tp in tps}
            if not any(behind.values()) or time.monotonic() > deadline:
                return behind
            await asyncio.sleep(1)
    finally:
        await consumer.stop()


def two_workers(
    kafka: str, redis: str, tmp_path: Path, name: str
) -> tuple[dict[str, str], list[WorkerProcess]]:
    """The settings both share, and two workers of one group, each with its own store."""
    base = worker_env(kafka, redis, tmp_path, name, partitions=PARTITIONS, idle_timeout_s=60)
    workers = [
        WorkerProcess(
            {**base, "TRACEJUDGE_WEB_PORT": str(free_port()), "TRACEJUDGE_DATA_DIR": str(d)},
            tmp_path / f"worker{i}.log",
        )
        for i, d in enumerate((tmp_path / "a", tmp_path / "b"))
    ]
    return base, workers


async def supervise(workers: list[WorkerProcess], down: set[int], done: asyncio.Event) -> int:
    """Until `done`, start again every worker that exited, except those taken down on purpose;
    how many restarts."""
    restarts = 0
    while not done.is_set():
        for i, worker in enumerate(workers):
            if i not in down:
                restarts += await asyncio.to_thread(worker.restart_if_exited)
        await asyncio.sleep(0.5)
    return restarts


def what_happened(workers: list[WorkerProcess]) -> str:
    """The workers' lines about holes, stalls and exits: what a failed assertion needs."""
    marks = ("seeking back", "hole read", "passed over", "stalled", "CRITICAL", "==== start")
    lines = [
        f"worker{i}: {line.strip()[:200]}"
        for i, worker in enumerate(workers)
        for line in worker.log.read_text(errors="replace").splitlines()
        if any(mark in line for mark in marks)
    ]
    return "\n".join(lines[-60:])


@pytest.mark.parametrize("repeat", runs())  # scripts/soak.sh N: N in a row
async def test_kill_9_and_restart_five_times_skips_nothing(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, repeat: int
) -> None:
    base, workers = two_workers(kafka_bootstrap, redis_url, tmp_path, "gaps")
    run = uuid.uuid4().hex[:6]
    stop, supervising = asyncio.Event(), asyncio.Event()
    disruptions: list[tuple[float, float]] = []  # (killed at, group stable again at)
    try:
        for worker in workers:
            worker.start(timeout_s=180)
        topic = workers[0].topic("events")
        producing = asyncio.create_task(traffic(kafka_bootstrap, topic, run, stop))
        for cycle in range(CYCLES):
            await asyncio.sleep(6)
            victim = workers[cycle % 2]
            killed_at = time.time()
            victim.kill9()
            await asyncio.sleep(2)
            await asyncio.to_thread(victim.start, True, 180.0)
            await asyncio.to_thread(workers[(cycle + 1) % 2].wait_healthy, 120.0)
            disruptions.append((killed_at, time.time()))
        # from now on a worker that exits is started again (the kills above are over)
        supervisor = asyncio.create_task(supervise(workers, set(), supervising))
        await asyncio.sleep(4)
        stop.set()
        finals = await producing
        records = await consume(
            kafka_bootstrap,
            workers[0].topic("evaluations"),
            until=lambda rs: {json.loads(r.value)["request_id"] for r in rs} >= set(finals),
            timeout_s=120,
            settle_s=3.0,
        )
        behind = await commits_reach_the_end(kafka_bootstrap, base["TRACEJUDGE_APP_ID"], topic, 60)
        supervising.set()
        restarts = await supervisor
    finally:
        stop.set()
        supervising.set()
        for worker in workers:
            worker.stop()
    evaluations: dict[str, list[dict[str, object]]] = defaultdict(list)
    for record in records:
        value = json.loads(record.value)
        if value["request_id"] in finals:
            evaluations[value["request_id"]].append(value)
    missing = set(finals) - set(evaluations)
    assert not missing, f"{len(missing)} of {len(finals)} requests never evaluated"
    assert all(len({e["evaluation_id"] for e in es}) == 1 for es in evaluations.values())
    idle_closed = [r for r, es in evaluations.items() if es[0]["closed_by"] != "final_response"]
    assert not idle_closed, f"closed by idle timeout: {idle_closed[:5]}"

    def deadline(final_at: float) -> float:
        for killed_at, stable_at in disruptions:
            if killed_at - LATE_S <= final_at <= stable_at:
                return stable_at + LATE_S
        return final_at + LATE_S

    late = {
        rid: round(float(es[0]["ts"]) - finals[rid], 1)  # type: ignore[arg-type]
        for rid, es in evaluations.items()
        if float(es[0]["ts"]) > deadline(finals[rid])  # type: ignore[arg-type]
    }
    assert not late, f"evaluated too late (s after final_response): {list(late.items())[:5]}"
    assert not any(behind.values()), (
        f"commits behind the log end per partition: {behind}\n{what_happened(workers)}"
    )
    repaired = [w.log.read_text().count("seeking back") for w in workers]
    print(
        f"\nkill -9 loop run {repeat}: {len(finals)} requests, {CYCLES} kill -9 cycles; "
        f"skips repaired per worker: {repaired}; restarted by the supervisor: {restarts}"
    )


async def test_a_rebalance_as_traffic_ends_leaves_no_commit_behind(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    """One worker is lost for good just before the traffic stops: the other takes its
    partitions over after the session timeout, when no record will come any more. The records
    either worker handled but had not committed are then passed over by the consumer with
    nothing after them to show it; the commits must still reach the log end."""
    base, workers = two_workers(kafka_bootstrap, redis_url, tmp_path, "tail")
    stop, supervising = asyncio.Event(), asyncio.Event()
    try:
        for worker in workers:
            worker.start(timeout_s=180)
        topic = workers[0].topic("events")
        producing = asyncio.create_task(traffic(kafka_bootstrap, topic, uuid.uuid4().hex, stop))
        await asyncio.sleep(6)
        workers[1].kill9()
        supervisor = asyncio.create_task(supervise(workers, {1}, supervising))
        # the session timeout is 10 s: the rebalance comes about a second after the last record
        await asyncio.sleep(9)
        stop.set()
        finals = await producing
        behind = await commits_reach_the_end(kafka_bootstrap, base["TRACEJUDGE_APP_ID"], topic, 60)
        records = await consume(
            kafka_bootstrap,
            workers[0].topic("evaluations"),
            until=lambda rs: {json.loads(r.value)["request_id"] for r in rs} >= set(finals),
            timeout_s=30,
        )
        supervising.set()
        await supervisor
    finally:
        stop.set()
        supervising.set()
        for worker in workers:
            worker.stop()
    assert not any(behind.values()), (
        f"commits behind the log end per partition: {behind}\n{what_happened(workers)}"
    )
    evaluated = {json.loads(r.value)["request_id"] for r in records}
    assert not set(finals) - evaluated, f"{len(set(finals) - evaluated)} requests never evaluated"
