"""The explorer's reader: the evaluations, alerts and reflections topics into the store."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from aiokafka.errors import KafkaError

from tracejudge.models import names
from tracejudge.streams.kafka.io import follow_since
from tracejudge.streams.settings import Settings
from tracejudge.streams.ui.store import VerdictStore

log = logging.getLogger(__name__)


async def feed(settings: Settings, store: VerdictStore) -> None:
    """Fill the store from the three topics, and keep it current. A broker away for a while is
    waited out by the consumer; anything else is logged and the read started again."""
    topics = {settings.topic(k): k for k in (names.EVALUATIONS, names.ALERTS, names.REFLECTIONS)}
    while True:
        try:
            async for record in follow_since(settings, list(topics), settings.ui_look_back_s):
                if record.timestamp < (time.time() - settings.ui_look_back_s) * 1000:
                    continue  # read again after a reset to the oldest: still only the look-back
                where = f"{record.topic}:{record.partition}:{record.offset}"
                take(store, topics[record.topic], record.value or b"", where)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:  # the broker away: one line, not a traceback every 5 s
            log.warning("explorer: Kafka unavailable (%s); reading again in 5 s", exc)
            await asyncio.sleep(5)
        except Exception:
            log.exception("explorer: reading the topics failed; starting again in 5 s")
            await asyncio.sleep(5)


def take(store: VerdictStore, kind: str, value: bytes, where: str = "") -> None:
    """One record of `kind`'s topic; `where` (topic, partition, offset) stands for an output's
    id when it has none."""
    try:
        record = json.loads(value)
    except ValueError:
        return  # not ours to judge here; the worker dead-letters what it cannot read
    if not isinstance(record, dict) or not isinstance(record.get("request_id"), str):
        return
    if kind == names.EVALUATIONS:
        store.add_evaluation(record, value)
    else:
        output_id = record.get("alert_id") or record.get("reflection_id") or where
        store.add_output(kind, record["request_id"], str(output_id))
