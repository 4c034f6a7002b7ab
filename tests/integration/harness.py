"""A real `tracejudge worker` process and plain Kafka clients to drive it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.realservices import ROOT, free_port, stop_process
from tracejudge.client import Tracer
from tracejudge.settings import Settings

Headers = list[tuple[str, bytes]]


@dataclass
class WorkerProcess:
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    health_codes: list[int] = field(default_factory=list)  # distinct codes seen while starting
    command: str = "worker"  # or "judge": the judge stage on its own
    settings: Settings = field(init=False)

    def __post_init__(self) -> None:
        self.settings = Settings.model_validate(
            {
                k[len("TRACEJUDGE_") :].lower(): v
                for k, v in self.env.items()
                if k.startswith("TRACEJUDGE_")
            }
        )

    def topic(self, name: str) -> str:
        return self.settings.topic(name)

    def start(self, wait: bool = True, timeout_s: float = 120.0) -> WorkerProcess:
        self.starts += 1
        env = {**os.environ, **self.env}
        with self.log.open("ab") as out:
            out.write(f"\n==== start #{self.starts} ====\n".encode())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tracejudge.streams.cli", self.command],
            cwd=ROOT,
            env=env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        if wait:
            self.wait_healthy(timeout_s)
        return self

    def health(self) -> tuple[int, dict[str, Any]]:
        url = f"http://127.0.0.1:{self.settings.web_port}/health"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError):
            return 0, {}

    def wait_healthy(self, timeout_s: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited {self.process.returncode}:\n{self.tail()}")
            code, body = self.health()
            if code and (not self.health_codes or self.health_codes[-1] != code):
                self.health_codes.append(code)
            if code == 200:
                return body
            time.sleep(0.05)
        raise AssertionError(f"worker not healthy after {timeout_s}s:\n{self.tail()}")

    def restart_if_exited(self) -> bool:
        """What a supervisor does: start the worker again if it exited."""
        if self.process is not None and self.process.poll() is not None:
            self.start()
            return True
        return False

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.process)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def worker_env(
    kafka: str, redis: str, data_dir: Path, name: str, **overrides: Any
) -> dict[str, str]:
    unique = f"it-{name}-{uuid.uuid4().hex[:6]}"
    env = {
        "TRACEJUDGE_KAFKA_BOOTSTRAP": kafka,
        "TRACEJUDGE_REDIS_URL": redis,
        "TRACEJUDGE_TOPIC_PREFIX": f"{unique}.",
        "TRACEJUDGE_APP_ID": unique,
        "TRACEJUDGE_PARTITIONS": "3",
        "TRACEJUDGE_WEB_HOST": "127.0.0.1",
        "TRACEJUDGE_WEB_PORT": str(free_port()),
        "TRACEJUDGE_DATA_DIR": str(data_dir / unique),
        "TRACEJUDGE_IDLE_CHECK_INTERVAL_S": "0.5",
        "TRACEJUDGE_LOG_LEVEL": "info",
        # a killed worker's partitions come back after this, not after the default 60 s
        "TRACEJUDGE_BROKER_SESSION_TIMEOUT_S": "10",
        "TRACEJUDGE_STALL_TIMEOUT_S": "15",
    }
    env.update({f"TRACEJUDGE_{k.upper()}": str(v) for k, v in overrides.items()})
    return env


def stopping_worker(
    kafka: str, redis: str, workdir: Path, name: str, control_keys: str, **overrides: Any
) -> WorkerProcess:
    """A started worker that signs its control records with `control_keys` and stops a loop at
    its first crossing (`loop_action = "stop"` for every agent), as a team may choose."""
    budgets = workdir / "budgets.toml"
    budgets.write_text('[default]\nloop_action = "stop"\n')
    env = worker_env(
        kafka, redis, workdir, name, control_keys=control_keys, budgets_file=budgets, **overrides
    )
    return WorkerProcess(env, workdir / "worker.log").start()


def tracer_for(worker: WorkerProcess, control_keys: str | None = None) -> Tracer:
    """An agent's tracer on the worker's broker, Redis and topics; `control_keys`: the keys its
    interventions are signed with, when the worker signs them."""
    s = worker.settings
    return Tracer(
        s.kafka_bootstrap,
        redis_url=s.redis_url,
        topic_prefix=s.topic_prefix,
        control_keys=control_keys,
    )


def refund_request(rid: str) -> list[dict[str, Any]]:
    """A small complete request: task, two successful tool calls, final response."""
    return [
        {"type": "task_started", "request_id": rid, "goal": "look up order 7 and refund it"},
        {
            "type": "tool_call",
            "request_id": rid,
            "step_index": 1,
            "tool": "lookup",
            "success": True,
        },
        {
            "type": "tool_call",
            "request_id": rid,
            "step_index": 2,
            "tool": "refund",
            "success": True,
        },
        {"type": "final_response", "request_id": rid, "output": "Order 7 was refunded: $12."},
    ]


def encode_event(event: dict[str, Any] | bytes) -> tuple[bytes | None, bytes]:
    if isinstance(event, bytes):
        return None, event
    return event["request_id"].encode(), json.dumps(event).encode()


async def produce(
    bootstrap: str,
    topic: str,
    messages: Iterable[tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, int]],
    max_request_size: int = 1_000_000,
) -> int:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_request_size=max_request_size
    )
    await producer.start()
    sent = 0
    try:
        futures = []
        for message in messages:
            key, value, *partition = message
            futures.append(
                await producer.send(
                    topic, key=key, value=value, partition=partition[0] if partition else None
                )
            )
            sent += 1
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return sent


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic made before anything reads or writes it (a worker is not there to make it)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, replication_factor=1)])
    finally:
        await admin.close()


async def produce_events(bootstrap: str, topic: str, events: Iterable[dict[str, Any]]) -> int:
    return await produce(bootstrap, topic, (encode_event(e) for e in events))


async def consume(
    bootstrap: str,
    topic: str,
    *,
    until: Callable[[list[ConsumerRecord]], bool] | None,
    timeout_s: float = 60.0,
    settle_s: float = 0.0,
) -> list[ConsumerRecord]:
    """Every record of a topic from the beginning, until `until(records)` (then `settle_s` more,
    to catch unexpected extras) or the timeout. `until=None`: until the records the topic held
    when reading began are read, then `settle_s` more: what is there, and what comes soon."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        metadata_max_age_ms=1000,
    )
    await consumer.start()
    records: list[ConsumerRecord] = []
    try:
        deadline = time.monotonic() + timeout_s
        settled_at: float | None = None
        ends: dict[TopicPartition, int] | None = None
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            records += [r for rs in batch.values() for r in rs]
            if until is None and ends is None and consumer.assignment():
                ends = await consumer.end_offsets(list(consumer.assignment()))
            if settled_at is None and (
                until(records) if until is not None else await read_to(consumer, ends)
            ):
                settled_at = time.monotonic() + settle_s
            if settled_at is not None and time.monotonic() >= settled_at:
                break
    finally:
        await consumer.stop()
    return records


async def read_to(consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int] | None) -> bool:
    """Whether the consumer has read every partition up to `ends` (None: not known yet)."""
    if ends is None:
        return False
    for partition, end in ends.items():
        if await consumer.position(partition) < end:
            return False
    return True


def values(records: Iterable[ConsumerRecord]) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in records]


def key_value_lines(path: Path) -> list[tuple[bytes | None, bytes | None]]:
    """A JSONL file as messages keyed by request_id, the way `tracejudge publish` sends them."""
    from tracejudge.streams.kafka.io import key_of

    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    return [(key_of(line), line) for line in lines]


async def grouped(
    worker: WorkerProcess,
    topic: str,
    keys: set[str],
    *,
    field: str = "request_id",
    wait_for_all: bool = False,
    timeout_s: float = 60.0,
    settle_s: float = 1.0,
    pending: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """Values of an output topic whose `field` is one of `keys`, grouped by it.

    With `wait_for_all`, reads until every key has a value (then `settle_s` more, to catch
    unexpected extras); otherwise reads what arrives within `settle_s`. Evaluations published
    while the LLM judge's is on its way (`final` false) are left out unless `pending`."""

    def kept(value: dict[str, Any]) -> bool:
        return pending or value.get("final") is not False

    def until(records: list[ConsumerRecord]) -> bool:
        found = (json.loads(r.value) for r in records)
        return keys <= {v.get(field) for v in found if kept(v)}

    records = await consume(
        worker.settings.kafka_bootstrap,
        worker.topic(topic),
        until=until if wait_for_all else None,
        timeout_s=timeout_s,
        settle_s=settle_s,
    )
    found: dict[str, list[dict[str, Any]]] = {key: [] for key in keys}
    for value in values(records):
        if value.get(field) in found and kept(value):
            found[value[field]].append(value)
    return found


async def wait_counter(
    worker: WorkerProcess, count: int, name: str = "evaluations", timeout_s: float = 300
) -> None:
    """Until the worker's /health counter `name` reaches `count`."""
    deadline = time.monotonic() + timeout_s
    while worker.health()[1].get("counters", {}).get(name, 0) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} < {count}:\n{worker.tail()}")
        await asyncio.sleep(0.05)
