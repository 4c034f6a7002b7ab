"""Tracers: record an agent's events without ever blocking or breaking it, read verdicts back.

`Tracer` for plain code, `AsyncTracer` for asyncio agents: the same surface (`request`,
`traced`, `outcome`, `flush`, `close`, `early_stop`, `wait_for_evaluation`, `sent`, `dropped`,
`queued`, a context manager), the second with awaitables where the first blocks. Both hand
events to the same `Sender` (client/transport.py): nothing connects when a tracer is made,
events are buffered while the broker is away and delivered once it answers, a full buffer
drops the newest event and counts it, and a transport problem never raises into the agent.
Kafka options (`security_protocol`, `sasl_mechanism`, `sasl_plain_username`, … or librdkafka
names with dots) configure the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from tracejudge.client.early_stop import AsyncEarlyStopClient, EarlyStopClient, redis_module
from tracejudge.client.events import Recorder, outcome_event
from tracejudge.client.transport import Sender
from tracejudge.client.verdicts import evaluation_from_topic
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.names import EVALUATIONS, EVENTS, REDIS_EVALUATION_KEY
from tracejudge.models.outputs import EarlyStopDecision, Evaluation

DEFAULT_QUEUE = 100_000
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


class _Tracing:
    """What both tracers share: the sender, recorders, and where verdicts are read."""

    def __init__(
        self,
        bootstrap: str,
        *,
        redis_url: str | None = None,
        topic_prefix: str = "tracejudge.",
        queue_size: int = DEFAULT_QUEUE,
        linger_ms: float = 20.0,
        batch_bytes: int = 1_000_000,
        queue_bytes: int = 64 * 1024 * 1024,
        compression: str = "none",
        delivery_timeout_s: float = 600.0,
        warn_interval_s: float = 60.0,
        exit_timeout_s: float = 5.0,
        **kafka_options: Any,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic_prefix = topic_prefix
        self.redis_url = redis_url
        self.kafka_options = kafka_options
        self._sender = Sender(
            bootstrap,
            topic_prefix + EVENTS,
            queue_size=queue_size,
            queue_bytes=queue_bytes,
            linger_ms=linger_ms,
            batch_bytes=batch_bytes,
            compression=compression,
            delivery_timeout_s=delivery_timeout_s,
            warn_interval_s=warn_interval_s,
            exit_timeout_s=exit_timeout_s,
            options=kafka_options,
        )

    @property
    def sent(self) -> int:
        """Events the broker acknowledged."""
        return self._sender.sent

    @property
    def dropped(self) -> int:
        """Events given up: a full buffer, a delivery timeout, a close that could not wait."""
        return self._sender.dropped

    @property
    def queued(self) -> int:
        """Events handed over and not acknowledged yet."""
        return self._sender.queued

    def request(self, goal: str, **kwargs: Any) -> Recorder:
        """A recorder for one request; its `task_started` is handed over at once."""
        return Recorder(self._offer, goal, **kwargs)

    def outcome(
        self,
        request_id: str,
        ok: bool | None = None,
        score: float | None = None,
        source: str = "user",
        note: str | None = None,
    ) -> bool:
        """Ground truth about a request, any time after its verdict (minutes to days): `ok`
        (did the run do what it was for) and/or a `score` in 0-1; `source` a short lowercase
        word saying where it comes from (human, test, reward, user: a later outcome of the
        same source replaces the earlier); `note`, free text, clipped (and masked wherever
        tracejudge outputs it). Sent like the request's events, keyed by `request_id`.

        False when it was not sent: bad arguments (no `ok` nor `score`, a score outside 0-1,
        a source not a lowercase word) are logged on the `tracejudge.client` logger and
        counted in `dropped`, as a full buffer is. Never raises."""
        try:
            event = outcome_event(request_id, ok=ok, score=score, source=source, note=note)
        except InvalidEvent as exc:
            # the reason names the field, never the request: one warning per interval for all
            self._sender.drop(f"an outcome refused: {exc.reason}")
            return False
        except Exception as exc:  # whatever was passed, the agent goes on
            self._sender.drop(f"an outcome refused: {type(exc).__name__}: {exc}")
            return False
        return self._offer(event)

    def emit(self, event: dict[str, Any]) -> bool:
        """Hand over one contract event as it is (integrations build their own); False when it
        was dropped (and counted) instead. Never raises."""
        if not isinstance(event.get("request_id"), str):
            self._sender.drop("an event without a request_id")
            return False
        return self._offer(event)

    def _offer(self, event: dict[str, Any]) -> bool:
        try:
            value = _encode(event).encode("utf-8")
        except (TypeError, ValueError) as exc:  # e.g. a circular structure in a field
            self._sender.drop(f"not encodable: {exc}")
            return False
        return self._sender.offer(event["request_id"].encode("utf-8"), value)

    def _evaluation_key(self, request_id: str) -> str:
        return REDIS_EVALUATION_KEY.format(request_id=request_id)


class Tracer(_Tracing):
    """For code without an event loop. Every method returns at once or within its timeout."""

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

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
        """Wait until everything handed over was acknowledged; False if `timeout` passed
        first (what is left stays buffered)."""
        return self._sender.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Flush within `timeout`, then stop sending. Also done at interpreter exit."""
        self._sender.close(timeout)

    def early_stop(self, request_id: str) -> EarlyStopDecision | None:
        """tracejudge's early-stop decision for an iterative request, if one was made (Redis)."""
        if self.redis_url is None:
            return None
        return EarlyStopClient(self.redis_url).check(request_id)

    def wait_for_evaluation(self, request_id: str, timeout: float = 30.0) -> Evaluation | None:
        """The request's final evaluation once published; after `timeout`, the rules' verdict
        published while the LLM judge's is on its way (its `final` is False) when that is all
        there is, else None. From Redis when the tracer has it, else read from the evaluations
        topic."""
        if self.redis_url is None:
            return evaluation_from_topic(
                self.bootstrap,
                self.topic_prefix + EVALUATIONS,
                request_id,
                timeout,
                self.kafka_options,
            )
        redis = redis_module()
        client = redis.Redis.from_url(self.redis_url, socket_timeout=2.0)
        deadline = time.monotonic() + timeout
        pending = None
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(redis.RedisError, OSError):
                    raw = client.get(self._evaluation_key(request_id))
                    if raw:
                        pending = Evaluation.model_validate_json(raw)  # type: ignore[arg-type]
                        if pending.final:
                            return pending
                time.sleep(0.1)
            return pending
        finally:
            client.close()


class AsyncTracer(_Tracing):
    """For asyncio agents: the same as `Tracer`, with awaitables where it would block."""

    async def start(self) -> AsyncTracer:
        """Kept for code written before tracers connected lazily: nothing to do."""
        return self

    async def __aenter__(self) -> AsyncTracer:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def traced(self, goal: str, **kwargs: Any) -> AsyncIterator[Recorder]:
        """`async with tracer.traced(goal) as req:` — as `Tracer.traced`."""
        recorder = self.request(goal, **kwargs)
        try:
            yield recorder
        except Exception as exc:
            if not recorder.finished:
                recorder.final(f"failed: {type(exc).__name__}: {exc}")
            raise

    # `timeout` in seconds, as in the synchronous Tracer: one API for both flavours
    async def flush(self, timeout: float = 10.0) -> bool:  # noqa: ASYNC109
        return await asyncio.to_thread(self._sender.flush, timeout)

    async def close(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        await asyncio.to_thread(self._sender.close, timeout)

    async def early_stop(self, request_id: str) -> EarlyStopDecision | None:
        if self.redis_url is None:
            return None
        client = AsyncEarlyStopClient(self.redis_url)
        try:
            return await client.check(request_id)
        finally:
            await client.aclose()

    async def wait_for_evaluation(
        self,
        request_id: str,
        timeout: float = 30.0,  # noqa: ASYNC109
    ) -> Evaluation | None:
        if self.redis_url is None:
            return await asyncio.to_thread(
                evaluation_from_topic,
                self.bootstrap,
                self.topic_prefix + EVALUATIONS,
                request_id,
                timeout,
                self.kafka_options,
            )
        redis = redis_module()
        client = redis.asyncio.from_url(self.redis_url, socket_timeout=2.0)
        deadline = time.monotonic() + timeout
        pending = None
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(redis.RedisError, OSError):
                    raw = await client.get(self._evaluation_key(request_id))
                    if raw:
                        pending = Evaluation.model_validate_json(raw)
                        if pending.final:
                            return pending
                await asyncio.sleep(0.1)
            return pending
        finally:
            await client.aclose()
