"""The one error policy: dead-letter the record and go on, or exit for the supervisor.

Every consumer of the worker (the two Faust agents and the judge stage's consumer) runs its
handler through `ErrorPolicy.run`, so the choice is made in one place (quix-streams'
error callbacks are the model).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, NoReturn

from aiokafka.errors import KafkaError

from tracejudge.judges.masking.redact import mask
from tracejudge.models import names
from tracejudge.models.errors import InvalidEvent
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import Channel

log = logging.getLogger(__name__)

Action = Literal["dead_letter", "exit"]
Exit = Callable[[str, BaseException], NoReturn]
DlqPayload = Literal["keep", "mask", "drop"]


def on_error(exc: BaseException) -> Action:
    """Kafka being unusable is not the record's fault: exit so that it is delivered again.
    Anything else is about this record: dead-letter it, so that the next one is processed."""
    return "exit" if isinstance(exc, KafkaError) else "dead_letter"


def exit_for_supervisor(reason: str, exc: BaseException) -> NoReturn:
    """Stop the process at once, committing nothing more.

    An exception escaping the agent would kill it while the worker looks healthy (Faust
    #175, #523); a graceful stop could commit the offset of the record that failed. Exiting
    hard lets the supervisor restart the worker and the record be delivered again.
    """
    log.critical("%s; exiting so that the event is redelivered after restart: %r", reason, exc)
    logging.shutdown()
    os._exit(70)


# What a stub keeps of a value too large to dead-letter whole.
STUB_HEAD_BYTES = 256
STUB_KEY_BYTES = 1024


def _stub(record: InRecord, code: str, reason: str, payload: DlqPayload) -> bytes:
    value = record.value or b""
    head = value[:STUB_HEAD_BYTES].decode("utf-8", "replace")
    return json.dumps(
        {
            "reason": "too_large",
            "error_class": code,
            "error": reason[:1000],
            "original_topic": record.topic,
            "original_partition": record.partition,
            "original_offset": record.offset,
            "size": len(value),
            "sha256": hashlib.sha256(value).hexdigest(),
            "head": head if payload == "keep" else mask(head) if payload == "mask" else "",
        },
        ensure_ascii=False,
    ).encode()


@dataclass
class DeadLetters:
    """Sends a record that cannot be processed to the DLQ with the reason in headers: whole,
    or, when the record itself cannot be re-sent (over the producer's request size), a stub
    that identifies it (topic, partition, offset, size, sha256, first bytes)."""

    dlq: Channel
    # keep: the original value (it holds nothing the input topic does not); mask: its text
    # masked like every output; drop: no value, only what identifies it (headers)
    payload: DlqPayload = "keep"
    metrics: Metrics = field(default_factory=Metrics)

    def _value(self, record: InRecord) -> bytes | None:
        if self.payload == "keep" or record.value is None:
            return record.value
        if self.payload == "mask":
            return mask(record.value.decode("utf-8", "replace")).encode("utf-8")
        return None

    async def send(self, record: InRecord, exc: Exception) -> None:
        # the reason may quote the input (a validation error does): masked in every mode
        reason = mask(exc.reason if isinstance(exc, InvalidEvent) else str(exc))
        code = exc.code if isinstance(exc, InvalidEvent) else type(exc).__name__
        headers = [
            (names.DLQ_ERROR_CLASS, code.encode()),
            (names.DLQ_ERROR, reason[:1000].encode("utf-8", "replace")),
            (names.DLQ_ORIGINAL_TOPIC, record.topic.encode()),
            (names.DLQ_ORIGINAL_PARTITION, str(record.partition).encode()),
            (names.DLQ_ORIGINAL_OFFSET, str(record.offset).encode()),
            (names.DLQ_ORIGINAL_SIZE, str(len(record.value or b"")).encode()),
            (names.DLQ_ORIGINAL_SHA256, hashlib.sha256(record.value or b"").hexdigest().encode()),
            (names.DLQ_PAYLOAD, self.payload.encode()),
        ]
        try:
            value = self._value(record)
            await (await self.dlq.send(key=record.key, value=value, headers=headers))
        except Exception as whole_exc:
            # A record the broker took may still be too large for our producer (or for the
            # DLQ topic): a stub must do, or this record would stop the partition for good.
            log.warning("cannot dead-letter %s whole (%r); sending a stub", record.topic, whole_exc)
            key = record.key
            if key is not None and len(key) > STUB_KEY_BYTES:
                key = hashlib.sha256(key).hexdigest().encode()
            stub = _stub(record, code, reason, self.payload)
            stub_headers = [*headers, (names.DLQ_STUB, b"true")]
            await (await self.dlq.send(key=key, value=stub, headers=stub_headers))
            self.metrics.counts["dead_lettered_stub"] += 1
        self.metrics.counts["dead_lettered"] += 1
        self.metrics.dead_letters.labels(code).inc()
        self.metrics.counts[f"dead_lettered_{code}"] += 1
        log.warning(
            "dead-lettered %s[%d]@%d: %s", record.topic, record.partition, record.offset, code
        )


@dataclass
class ErrorPolicy:
    dead_letters: DeadLetters
    exit: Exit = exit_for_supervisor

    async def run(self, record: InRecord, handler: Callable[[InRecord], Awaitable[None]]) -> None:
        """Handle one record; never lets an exception escape into the consuming loop."""
        try:
            await handler(record)
        except Exception as exc:
            if on_error(exc) == "exit":
                self.exit(f"kafka failure while handling a record of {record.topic}", exc)
            if not isinstance(exc, InvalidEvent):
                log.exception("unexpected error on a record of %s; dead-lettering it", record.topic)
            try:
                await self.dead_letters.send(record, exc)
            except Exception as dlq_exc:
                self.exit("cannot dead-letter a message", dlq_exc)
