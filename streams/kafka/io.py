"""Plain aiokafka clients for the command line: publish a file, tail a topic."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from tracejudge.settings import Settings
from tracejudge.streams.kafka.security import client_options


@dataclass(frozen=True)
class PublishReport:
    sent: int
    skipped: int
    topic: str


def key_of(line: bytes) -> bytes | None:
    """The message key of a contract event: its request_id, when the line has one."""
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    rid = value.get("request_id") if isinstance(value, dict) else None
    return rid.encode("utf-8") if isinstance(rid, str) and rid else None


async def publish_lines(settings: Settings, topic: str, lines: Iterable[bytes]) -> PublishReport:
    """Send every non-blank line as one message keyed by its request_id; wait for delivery."""
    producer = AIOKafkaProducer(
        **client_options(settings),
        acks="all",
        max_request_size=settings.kafka_max_request_bytes,
    )
    await producer.start()
    sent = skipped = 0
    try:
        pending = []
        for raw in lines:
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                skipped += 1
                continue
            pending.append(await producer.send(topic, value=line, key=key_of(line)))
            sent += 1
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return PublishReport(sent=sent, skipped=skipped, topic=topic)


async def read_topic(
    settings: Settings,
    topic: str,
    *,
    from_beginning: bool,
    idle_timeout_s: float | None = None,
    stop: Callable[[], bool] | None = None,
) -> AsyncIterator[ConsumerRecord]:
    """Follow every partition of a topic without joining a consumer group.

    Without a group nothing is committed and nothing waits for a rebalance, so tailing starts
    at once and never disturbs the workers. Stops after `idle_timeout_s` without a record.
    """
    consumer = AIOKafkaConsumer(
        topic,
        **client_options(settings),
        group_id=None,
        auto_offset_reset="earliest" if from_beginning else "latest",
        metadata_max_age_ms=5000,
    )
    await consumer.start()
    try:
        last = time.monotonic()
        while stop is None or not stop():
            batch = await consumer.getmany(timeout_ms=200)
            records = [r for rs in batch.values() for r in rs]
            if records:
                last = time.monotonic()
            for record in records:
                yield record
            if idle_timeout_s is not None and time.monotonic() - last > idle_timeout_s:
                return
    finally:
        await consumer.stop()


async def _seek_since(
    consumer: AIOKafkaConsumer,
    tps: list[TopicPartition],
    since_s: float,
    ends: dict[TopicPartition, int],
) -> None:
    """Each partition at its first record of the last `since_s` seconds, or at its end when
    it has none that recent."""
    since = int((time.time() - since_s) * 1000)
    starts = await consumer.offsets_for_times({tp: since for tp in tps})
    for tp in tps:
        found = starts.get(tp)
        consumer.seek(tp, found.offset if found is not None else ends[tp])


async def read_since(
    settings: Settings, topic: str, since_s: float
) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of every record written to `topic` in the last `since_s` seconds, up to
    the end offsets at the call, in offset order per partition and time order across them.
    No group: nothing committed, the workers undisturbed."""
    from tracejudge.streams.kafka.admin import partition_counts

    count = (await partition_counts(settings)).get(topic, 0)
    if not count:
        # no such topic (not created yet): nothing to read; and aiokafka's consumer, stopped
        # with nothing assigned, raised CancelledError out of its own stop()
        return []
    consumer = AIOKafkaConsumer(**client_options(settings), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(count)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await _seek_since(consumer, tps, since_s, ends)
        taken: list[ConsumerRecord] = []
        remaining = {tp for tp in tps if await consumer.position(tp) < ends[tp]}
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, records in batch.items():
                taken += [r for r in records if r.offset < ends[tp]]
            remaining = {tp for tp in remaining if await consumer.position(tp) < ends[tp]}
        taken.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
        return [(r.key, r.value or b"") for r in taken]
    finally:
        await consumer.stop()


async def follow_since(
    settings: Settings, topics: list[str], since_s: float, wait_s: float = 5.0
) -> AsyncIterator[ConsumerRecord]:
    """Every record of `topics` from `since_s` seconds ago on, then each new one, until
    cancelled. No group: nothing committed, the workers undisturbed. Topics that do not exist
    yet are waited for (a reader may start before the first worker creates them)."""
    from tracejudge.streams.kafka.admin import partition_counts

    counts: dict[str, int] = {}
    while not all(counts.get(t) for t in topics):
        counts = await partition_counts(settings)
        if not all(counts.get(t) for t in topics):
            await asyncio.sleep(wait_s)
    # a position the broker no longer has (retention, a broker restored or restarting) moves
    # to the oldest record, not the newest: read twice rather than skip (readers dedupe)
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        await consumer.start()  # inside: a failed start is stopped too (its connections closed)
        tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])]
        consumer.assign(tps)
        try:
            await _seek_since(consumer, tps, since_s, await consumer.end_offsets(tps))
        except Exception:  # a broker without time lookups (or a refusal): read it all
            await consumer.seek_to_beginning(*tps)
        while True:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    yield record
    finally:
        await consumer.stop()
