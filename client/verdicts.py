"""Reading verdicts back: from Redis when the tracer was given it, else from the evaluations
topic (assigned by hand, no consumer group joined, nothing committed)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tracejudge.client.transport import kafka_config
from tracejudge.models.outputs import Evaluation

LOOK_BACK_S = 300.0  # a verdict may have been published before anyone looked


def evaluation_from_topic(
    bootstrap: str, topic: str, request_id: str, timeout_s: float, options: dict[str, Any]
) -> Evaluation | None:
    """The request's final evaluation, read from `topic` since LOOK_BACK_S ago; after
    `timeout_s`, its pending one (`final` False) if that is all there was, else None.
    Blocking: the async tracer runs it on a thread."""
    deadline = time.monotonic() + timeout_s
    consumer = Consumer(
        {
            **kafka_config(bootstrap, options),
            # required by librdkafka; never joined (assign, not subscribe) and never committed
            "group.id": f"tracejudge-client-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "log_level": 2,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=max(0.1, deadline - time.monotonic()))
        partitions = sorted(metadata.topics[topic].partitions)
        since = int((time.time() - LOOK_BACK_S) * 1000)
        wanted = [TopicPartition(topic, p, since) for p in partitions]
        # the ends first: a verdict published between the two lookups is then at or after
        # the end we start from, never skipped
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5.0)[1]
            for p in partitions
        }
        found = consumer.offsets_for_times(wanted, timeout=5.0)
        consumer.assign(
            [
                TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else ends[p])
                for p, tp in zip(partitions, found, strict=True)
            ]
        )
        pending = None
        while (left := deadline - time.monotonic()) > 0:
            message = consumer.poll(min(0.2, left))
            if message is None or message.error() is not None:
                continue
            evaluation = _evaluation(message.value())
            if evaluation is not None and evaluation.request_id == request_id:
                if evaluation.final:
                    return evaluation
                pending = evaluation  # the judge's verdict replaces it: wait for that
        return pending
    except Exception:  # a broker away or a topic missing: no verdict to give, nothing raised
        return None
    finally:
        consumer.close()


def _evaluation(raw: bytes | None) -> Evaluation | None:
    try:
        return Evaluation.model_validate(json.loads(raw or b"null"))
    except (ValueError, RecursionError):  # not an evaluation of this contract: skipped, not fatal
        return None
