"""A consumed Kafka record as the handlers see it, whichever client fetched it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class InRecord:
    """One consumed Kafka record, whichever client fetched it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)
    timestamp: float | None = None  # the broker's record timestamp, seconds since the epoch

    @classmethod
    def of_faust(cls, event: Any) -> InRecord:
        message = event.message
        raw = message.headers or ()
        items = raw.items() if isinstance(raw, dict) else raw
        headers = {k: (v if isinstance(v, bytes) else str(v).encode()) for k, v in items}
        return cls(
            message.topic,
            message.partition,
            message.offset,
            event.key,
            event.value,
            headers,
            message.timestamp,  # faust gives seconds
        )

    @classmethod
    def of_aiokafka(cls, record: Any) -> InRecord:
        headers = {k: v for k, v in (record.headers or ())}
        stamp = record.timestamp / 1000 if record.timestamp is not None else None  # milliseconds
        return cls(
            record.topic, record.partition, record.offset, record.key, record.value, headers, stamp
        )
