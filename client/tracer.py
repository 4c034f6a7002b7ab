"""Tracers: queue an agent's events without ever blocking it, send them to Kafka, read verdicts.

`AsyncTracer` for asyncio agents, `Tracer` for plain ones (it runs the same sender on a thread of
its own). The queue is bounded: when it is full an event is dropped and counted (`dropped`),
never waited for. `flush(timeout)` waits for what is queued to be acknowledged, at most that
long. Kafka options (`security_protocol`, `sasl_mechanism`, `sasl_plain_username`, …) are
passed to aiokafka as given.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tracejudge.client.events import Recorder
from tracejudge.models.names import EVALUATIONS, EVENTS, REDIS_CONTROL_KEY, REDIS_EVALUATION_KEY
from tracejudge.models.outputs import EarlyStopDecision, Evaluation

DEFAULT_QUEUE = 10_000
LOOK_BACK_S = 300.0  # wait_for_evaluation without Redis reads the topic from this far back


class AsyncTracer:
    def __init__(
        self,
        bootstrap: str,
        *,
        redis_url: str | None = None,
        topic_prefix: str = "tracejudge.",
        queue_size: int = DEFAULT_QUEUE,
        **kafka_options: Any,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic_prefix = topic_prefix
        self.kafka_options = kafka_options
        self.dropped = 0
        self.sent = 0
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(queue_size)
        self._producer: AIOKafkaProducer | None = None
        self._sender: asyncio.Task[None] | None = None
        self._redis = aioredis.from_url(redis_url) if redis_url else None

    async def start(self) -> AsyncTracer:
        if self._producer is None:
            self._producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, acks="all", **self.kafka_options
            )
            await self._producer.start()
            self._sender = asyncio.create_task(self._send_forever())
        return self

    async def __aenter__(self) -> AsyncTracer:
        return await self.start()

    async def __aexit__(self, *_: Any) -> None:
        await self.close()

    def request(self, goal: str, **kwargs: Any) -> Recorder:
        """A recorder for one request; its `task_started` is queued at once."""
        return Recorder(self._offer, goal, **kwargs)

    def _offer(self, event: dict[str, Any]) -> bool:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            return False
        return True

    async def _send_forever(self) -> None:
        assert self._producer is not None
        topic = self.topic_prefix + EVENTS
        while True:
            event = await self._queue.get()
            try:
                key = event["request_id"].encode("utf-8")
                await self._producer.send_and_wait(topic, json.dumps(event).encode(), key=key)
                self.sent += 1
            except Exception:  # a send that failed after aiokafka's own retries: counted, gone
                self.dropped += 1
            finally:
                self._queue.task_done()

    # `timeout` in seconds, as in the synchronous Tracer: one API for both flavours
    async def flush(self, timeout: float = 10.0) -> bool:  # noqa: ASYNC109
        """Wait until everything queued was acknowledged; False if `timeout` passed first."""
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        await self.flush(timeout)
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
        if self._producer is not None:
            await self._producer.stop()
        if self._redis is not None:
            await self._redis.aclose()

    async def early_stop(self, request_id: str) -> EarlyStopDecision | None:
        """tracejudge's early-stop decision for an iterative request, if one was made (Redis)."""
        if self._redis is None:
            return None
        raw = await self._redis.get(REDIS_CONTROL_KEY.format(request_id=request_id))
        return EarlyStopDecision.model_validate_json(raw) if raw else None

    async def wait_for_evaluation(
        self,
        request_id: str,
        timeout: float = 30.0,  # noqa: ASYNC109
    ) -> Evaluation | None:
        """The request's evaluation once published; None after `timeout`. From Redis when the
        tracer has it, else read from the evaluations topic (no consumer group)."""
        deadline = time.monotonic() + timeout
        if self._redis is not None:
            key = REDIS_EVALUATION_KEY.format(request_id=request_id)
            while time.monotonic() < deadline:
                raw = await self._redis.get(key)
                if raw:
                    return Evaluation.model_validate_json(raw)
                await asyncio.sleep(0.1)
            return None
        async for evaluation in self._evaluations(deadline):
            if evaluation.request_id == request_id:
                return evaluation
        return None

    async def _partitions(self, topic: str) -> list[int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, **self.kafka_options)
        await admin.start()
        try:
            [described] = await admin.describe_topics([topic])
            return sorted(p["partition"] for p in described["partitions"])
        finally:
            await admin.close()

    async def _evaluations(self, deadline: float) -> AsyncIterator[Evaluation]:
        topic = self.topic_prefix + EVALUATIONS
        partitions = await self._partitions(topic)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, **self.kafka_options
        )
        await consumer.start()
        try:
            # assigned by hand (no group, nothing committed) and sought by time: from a few
            # minutes back, since the verdict may have been published before we looked
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            # the ends first: a verdict published between the two lookups is then at or after
            # the end we seek to, never skipped
            ends = await consumer.end_offsets(tps)
            since = await consumer.offsets_for_times(
                {tp: int((time.time() - LOOK_BACK_S) * 1000) for tp in tps}
            )
            for tp in tps:
                found = since.get(tp)
                consumer.seek(tp, found.offset if found is not None else ends[tp])
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for record in records:
                        yield Evaluation.model_validate_json(record.value or b"{}")
        finally:
            await consumer.stop()


class Tracer:
    """The same, for code without an event loop: the sender runs on its own thread; every
    method returns at once or within its timeout."""

    def __init__(self, bootstrap: str, *, redis_url: str | None = None, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._inner: AsyncTracer = self._call(self._build(bootstrap, redis_url, options), 30.0)

    async def _build(
        self, bootstrap: str, redis_url: str | None, options: dict[str, Any]
    ) -> AsyncTracer:
        return await AsyncTracer(bootstrap, redis_url=redis_url, **options).start()

    def _call(self, coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def dropped(self) -> int:
        return self._inner.dropped

    @property
    def sent(self) -> int:
        return self._inner.sent

    def request(self, goal: str, **kwargs: Any) -> Recorder:
        return Recorder(self._offer, goal, **kwargs)

    def _offer(self, event: dict[str, Any]) -> bool:
        # the queue belongs to the sender's loop: hand the event over without waiting
        queue = self._inner._queue
        if queue.full():
            self._inner.dropped += 1
            return False
        self._loop.call_soon_threadsafe(self._inner._offer, event)
        return True

    @contextlib.contextmanager
    def traced(self, goal: str, **kwargs: Any) -> Iterator[Recorder]:
        """`with tracer.traced(goal) as req:` — an exception before `req.final(...)` is
        recorded as the final response, so the request is judged rather than left open."""
        recorder = self.request(goal, **kwargs)
        try:
            yield recorder
        except Exception as exc:
            if not recorder.finished:
                recorder.final(f"failed: {type(exc).__name__}: {exc}")
            raise

    def flush(self, timeout: float = 10.0) -> bool:
        try:
            return bool(self._call(self._inner.flush(timeout), timeout + 1))
        except TimeoutError:
            return False

    def early_stop(self, request_id: str) -> EarlyStopDecision | None:
        return self._call(self._inner.early_stop(request_id), 5.0)  # type: ignore[no-any-return]

    def wait_for_evaluation(self, request_id: str, timeout: float = 30.0) -> Evaluation | None:
        return self._call(  # type: ignore[no-any-return]
            self._inner.wait_for_evaluation(request_id, timeout), timeout + 5
        )

    def close(self, timeout: float = 10.0) -> None:
        try:
            self._call(self._inner.close(timeout), timeout + 5)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
