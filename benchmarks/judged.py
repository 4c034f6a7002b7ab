"""The judge-on yardstick: judged throughput against its ideal, and the window agent's
rule-only throughput with the judge on and off.

    python -m benchmarks.judged [--latency-ms 500] [--seconds 30] [--rounds 3]

Starts the real Kafka and Redis and a scripted model server on loopback that answers every call
after `--latency-ms`. For LLM concurrency 4 and 16: a backlog of enough requests to keep the
judge busy for about `--seconds`, every one judged; judged evaluations per second (first call
to the model -> last evaluation on the topic) against the ideal, concurrency / model latency.
Then the side-by-side backlog (2,000 x 10 events) with the judge off, and on with 10% of the
requests sampled, `--rounds` times each in turn: the rate at which the window agent closes
the rule-only requests (first to last of their evaluations), and the CPU seconds of the
worker while it drains; then the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from benchmarks.side_by_side import EVENTS_PER_REQUEST, backlog, cpu_s
from tests.fake_llm import FakeLLM, tool_call_reply, verdict
from tests.integration.harness import WorkerProcess, produce, wait_counter, worker_env
from tests.realservices import start_kafka, start_redis


async def evaluations(bootstrap: str, topic: str, expected: int) -> list[dict[str, Any]]:
    """The evaluations on `topic` (each with its broker timestamp), once `expected` are there."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + 600
    try:
        while len(found) < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for r in records:
                    found.append({**json.loads(r.value), "_at": r.timestamp / 1000})
    finally:
        await consumer.stop()
    return found


@dataclass
class Run:
    evaluations: list[dict[str, Any]]
    main_cpu_s: float  # the worker's main process, while it drained the backlog
    worker_cpu_s: float  # with its child processes


async def run_worker(kafka: str, redis: str, workdir: Path, requests: int, **settings: Any) -> Run:
    env = worker_env(kafka, redis, workdir, "judged", partitions=4, **settings)
    worker = WorkerProcess(env, workdir / f"worker-{uuid.uuid4().hex[:6]}.log")
    lines = backlog(requests, uuid.uuid4().hex[:6])
    worker.start()
    assert worker.process is not None
    pid = worker.process.pid
    try:
        main, whole = cpu_s(pid, descendants=False), cpu_s(pid)
        await produce(kafka, worker.topic("events"), lines)
        await wait_counter(worker, requests, timeout_s=900)
        main, whole = cpu_s(pid, descendants=False) - main, cpu_s(pid) - whole
        return Run(await evaluations(kafka, worker.topic("evaluations"), requests), main, whole)
    finally:
        worker.stop()


async def judged(kafka: str, redis: str, workdir: Path, latency_s: float, seconds: float) -> None:
    calls: list[float] = []

    def answer(body: dict[str, Any], n: int) -> Any:
        calls.append(time.time())
        return tool_call_reply(verdict(True, False), delay_s=latency_s)

    with FakeLLM(answer) as model:
        for concurrency in (4, 16):
            ideal = concurrency / latency_s
            requests = int(ideal * seconds)
            calls.clear()
            run = await run_worker(
                kafka,
                redis,
                workdir,
                requests,
                llm_judge_enabled="true",
                llm_base_url=model.base_url,
                llm_api_key="test",
                llm_concurrency=concurrency,
                llm_cache_ttl_s=1,
            )
            ok = [e for e in run.evaluations if e["judge_status"] == "ok"]
            rate = len(ok) / (max(e["_at"] for e in ok) - min(calls))
            print(
                f"judge concurrency {concurrency:>2}, model {latency_s * 1000:.0f} ms: "
                f"{len(ok)}/{requests} judged, {rate:5.1f} judged/s, ideal {ideal:5.1f}: "
                f"{rate / ideal:.2f} of ideal (model saw at most {model.max_in_flight} at once)"
            )
            model.max_in_flight = 0


async def rule_only(kafka: str, redis: str, workdir: Path, latency_s: float, rounds: int) -> None:
    requests = 2000

    def answer(body: dict[str, Any], n: int) -> Any:
        return tool_call_reply(verdict(True, False), delay_s=latency_s)

    results: dict[str, list[tuple[float, float, float]]] = {}
    with FakeLLM(answer) as model:
        judge_on = {
            "llm_judge_enabled": "true",
            "llm_base_url": model.base_url,
            "llm_api_key": "test",
            "llm_concurrency": 16,
            "llm_sample_rate": 0.1,
            # 10% of all requests, as BENCHMARKS.md measured it: not every flagged one too
            "llm_judge_flagged": "false",
        }
        modes: dict[str, dict[str, Any]] = {
            "judge off": {},
            "judge on, 10% sampled": judge_on,
        }
        for n in range(rounds):
            for label, settings in modes.items():
                run = await run_worker(kafka, redis, workdir, requests, **settings)
                rules = [e for e in run.evaluations if e["judge_status"] in ("disabled", "skipped")]
                span = max(e["_at"] for e in rules) - min(e["_at"] for e in rules)
                # the agent also read the sampled requests' events in that span
                rate = requests * EVENTS_PER_REQUEST / span
                results.setdefault(label, []).append((rate, run.main_cpu_s, run.worker_cpu_s))
                print(
                    f"round {n + 1}, {label:<30}: {len(rules):>4} rule-only evaluations, "
                    f"{rate:6.0f} events/s through the window agent; CPU s: main process "
                    f"{run.main_cpu_s:5.2f}, whole worker {run.worker_cpu_s:5.2f}"
                )
    medians = {
        label: [statistics.median(col) for col in zip(*rows, strict=True)]
        for label, rows in results.items()
    }
    off = medians["judge off"]
    for label, (rate, main, whole) in medians.items():
        print(
            f"median of {rounds}, {label:<30}: {rate:6.0f} events/s ({rate / off[0]:.2f} of judge "
            f"off); CPU s: main process {main:5.2f} ({main / off[1]:.2f}), whole worker "
            f"{whole:5.2f} ({whole / off[2]:.2f})"
        )


async def main(latency_s: float, seconds: float, rounds: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-judged-"))
    kafka = start_kafka(workdir / "kafka")
    redis = start_redis(workdir / "redis")
    try:
        await judged(kafka.address, redis.address, workdir, latency_s, seconds)
        await rule_only(kafka.address, redis.address, workdir, latency_s, rounds)
    finally:
        kafka.stop()
        redis.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency-ms", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.latency_ms / 1000, args.seconds, args.rounds))
