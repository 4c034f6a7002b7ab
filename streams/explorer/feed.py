"""The explorer's reader: the evaluations, alerts and reflections topics into the store."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from aiokafka.errors import KafkaError

from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.streams.explorer.modes import take_alert
from tracejudge.streams.explorer.sessions import SessionBook
from tracejudge.streams.explorer.store import VerdictStore
from tracejudge.streams.kafka.io import follow_since

log = logging.getLogger(__name__)


async def feed(
    settings: Settings, store: VerdictStore, sessions: SessionBook | None = None
) -> None:
    """Fill the store from the three topics (and `sessions` from the sessions topic), and keep
    them current. A broker away for a while is waited out by the consumer; anything else is
    logged and the read started again."""
    kinds = (names.EVALUATIONS, names.ALERTS, names.REFLECTIONS, names.SESSIONS, names.MODES)
    topics = {settings.topic(k): k for k in kinds if k != names.SESSIONS or sessions is not None}
    while True:
        try:
            async for record in follow_since(settings, list(topics), settings.ui_look_back_s):
                if record.timestamp < (time.time() - settings.ui_look_back_s) * 1000:
                    continue  # read again after a reset to the oldest: still only the look-back
                where = f"{record.topic}:{record.partition}:{record.offset}"
                take(store, topics[record.topic], record.value or b"", where, sessions)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:  # the broker away: one line, not a traceback every 5 s
            log.warning("explorer: Kafka unavailable (%s); reading again in 5 s", exc)
            await asyncio.sleep(5)
        except Exception:
            log.exception("explorer: reading the topics failed; starting again in 5 s")
            await asyncio.sleep(5)


def take(
    store: VerdictStore,
    kind: str,
    value: bytes,
    where: str = "",
    sessions: SessionBook | None = None,
) -> None:
    """One record of `kind`'s topic; `where` (topic, partition, offset) stands for an output's
    id when it has none. A record it cannot read (anyone who can write to the topic can write
    one) is counted, logged the first time, and skipped: the rest of its partition is read on,
    where an exception would have sent the reader back to the start of its look-back, to fail
    on the same record every time."""
    try:
        record = json.loads(value)
        if kind == names.MODES:
            take_alert(store, value)
            return
        if kind == names.SESSIONS and sessions is not None:
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            sessions.add(record)
            return
        if not isinstance(record, dict) or not isinstance(record.get("request_id"), str):
            raise ValueError("not a JSON object with a request_id")
        if kind == names.EVALUATIONS:
            store.add_evaluation(record, value)
        else:
            output_id = record.get("alert_id") or record.get("reflection_id") or where
            store.add_output(kind, record["request_id"], str(output_id))
    except Exception as exc:  # whatever one record makes fail (`Infinity`: OverflowError)
        store.unreadable += 1
        if store.unreadable == 1:  # the count is on /health; the log says what it means once
            log.warning(
                "explorer: skipped a record of %s it cannot read (%s: %s); more are counted "
                "in /health's `unreadable`",
                where or kind,
                type(exc).__name__,
                str(exc).splitlines()[0][:200] if str(exc) else "",
            )
