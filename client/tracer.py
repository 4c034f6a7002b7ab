"""Tracers: record an agent's events without ever blocking or breaking it, read verdicts back.

`Tracer` for plain code, `AsyncTracer` for asyncio agents: the same surface (`request`,
`traced`, `outcome`, `session_outcome`, `end_session`, `flush`, `close`, `early_stop`,
`wait_for_evaluation`, `sent`, `dropped`, `queued`, a context manager), the second with
awaitables where the first blocks. Both hand events to the same `Sender`
(client/transport.py): nothing connects when a tracer is made, events are buffered while the
broker is away and delivered once it answers, a full buffer drops the newest event and counts
it, and a transport problem never raises into the agent. Kafka options (`security_protocol`,
`sasl_mechanism`, `sasl_plain_username`, … or librdkafka names with dots) configure the
connection.

Each tracer also reads back its requests' interventions (budgets crossed, loops found) on a
thread of its own, started with the first request: `req.should_stop()`, `req.stop_reason`,
`req.interventions`, `req.pending_steers()` (each steer once, for the next model call), or
`request(goal, on_intervention=fn)` (client/interventions.py).
`interventions=False` never starts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from tracejudge.client.early_stop import (
    AsyncEarlyStopClient,
    EarlyStopClient,
    LatestDecisions,
    redis_module,
)
from tracejudge.client.events import Recorder, outcome_event, session_end_event
from tracejudge.client.interventions import InterventionReader, InterventionStop, OnIntervention
from tracejudge.client.transport import Sender
from tracejudge.client.verdicts import evaluation_from_topic
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.names import CONTROL, EVALUATIONS, EVENTS, REDIS_EVALUATION_KEY
from tracejudge.models.outputs import EarlyStopDecision, Evaluation
from tracejudge.models.sessions import session_ref
from tracejudge.models.signing import control_key_set

log = logging.getLogger("tracejudge.client")

DEFAULT_QUEUE = 100_000
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


def _final_for(recorder: Recorder, exc: Exception) -> None:
    """The final response of a request its code left by raising: an `InterventionStop` is a
    run that stopped when told (its evaluation says for which), anything else a failure."""
    if isinstance(exc, InterventionStop):
        recorder.final(f"stopped: {exc}", stopped_by=exc.intervention.intervention_id)
    else:
        error = f"{type(exc).__name__}: {exc}"
        recorder.final(f"failed: {error}", error=error)


class _Tracing:
    """What both tracers share: the sender, recorders, and where verdicts are read."""

    def __init__(
        self,
        bootstrap: str,
        *,
        redis_url: str | None = None,
        topic_prefix: str = "tracejudge.",
        queue_size: int = DEFAULT_QUEUE,
        # 5 ms, not more: an intervention can only answer an event once it has left (the goal:
        # p99 under 50 ms from the crossing event to the agent; 20 ms made it 56 ms)
        linger_ms: float = 5.0,
        batch_bytes: int = 1_000_000,
        queue_bytes: int = 64 * 1024 * 1024,
        compression: str = "none",
        delivery_timeout_s: float = 600.0,
        warn_interval_s: float = 60.0,
        exit_timeout_s: float = 5.0,
        interventions: bool = True,
        control_keys: str | None = None,
        **kafka_options: Any,
    ) -> None:
        """`interventions`: read this tracer's requests' interventions back (a consumer on
        the control topic, on a thread, started with the first request); False: never.
        `control_keys`: the worker's TRACEJUDGE_CONTROL_KEYS (comma-separated; read from that
        environment variable when not given): only interventions one of them signed are acted
        on. Without keys every well-formed intervention is, and the tracer says so once."""
        self.bootstrap = bootstrap
        self.topic_prefix = topic_prefix
        self.redis_url = redis_url
        self._control_keys = control_keys  # the early-stop readers verify with the same
        self._early: EarlyStopClient | None = None  # made on the first early_stop
        self._latest = LatestDecisions()  # the newest early-stop decision answered, per request
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
        keys = control_key_set(control_keys)
        if keys is not None:
            keys = keys.for_deployment(topic_prefix)  # what the worker of these topics signs
        if interventions and keys is None:
            _say_unverified()
        elif interventions and keys is not None and not keys.keys and not keys.public:
            log.warning(
                "tracejudge: TRACEJUDGE_CONTROL_SIGNED_ONLY is set and no control key is: this "
                "agent acts on no stop or steer until it has the worker's key"
            )
        self._reader = (
            InterventionReader(
                bootstrap,
                topic_prefix + CONTROL,
                kafka_options,
                warn_interval_s=warn_interval_s,
                keys=keys,
            )
            if interventions
            else None
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

    def request(
        self, goal: str, *, on_intervention: OnIntervention | None = None, **kwargs: Any
    ) -> Recorder:
        """A recorder for one request; its `task_started` is handed over at once. The
        request's interventions are watched from then on (`req.should_stop()`); each is also
        passed to `on_intervention`, on the reader's thread, when given."""
        return Recorder(
            self._offer, goal, reader=self._reader, on_intervention=on_intervention, **kwargs
        )

    def outcome(
        self,
        request_id: str,
        ok: bool | None = None,
        score: float | None = None,
        source: str = "user",
        note: str | None = None,
        key: str | None = None,
    ) -> bool:
        """Ground truth about a request, any time after its verdict (minutes to days): `ok`
        (did the run do what it was for) and/or a `score` in 0-1; `source` a short lowercase
        word saying where it comes from (human, test, reward, user: a later outcome of the
        same source replaces the earlier); `note`, free text, clipped (and masked wherever
        tracejudge outputs it). Sent like the request's events, keyed by `request_id`.
        `key`: this source's key when the worker takes outcomes only from named sources
        (TRACEJUDGE_OUTCOME_KEYS): the outcome is signed with it.

        False when it was not sent: bad arguments (no `ok` nor `score`, a score outside 0-1,
        a source not a lowercase word) are logged on the `tracejudge.client` logger and
        counted in `dropped`, as a full buffer is. Never raises."""
        return self._made(
            "an outcome",
            lambda: outcome_event(
                request_id, ok=ok, score=score, source=source, note=note, key=key
            ),
        )

    def session_outcome(
        self,
        session_key: str,
        *,
        agent_name: str | None,
        ok: bool | None = None,
        score: float | None = None,
        source: str = "user",
        note: str | None = None,
        key: str | None = None,
    ) -> bool:
        """Ground truth about a whole conversation (the session of `agent_name` and
        `session_key`): joined to its final session verdict, counted in agreement and
        calibration under the agent's sessions. Otherwise as `outcome`. Never raises."""
        return self._made(
            "an outcome",
            lambda: outcome_event(
                session_ref(agent_name, session_key),
                ok=ok,
                score=score,
                source=source,
                note=note,
                key=key,
                session=(agent_name, session_key),
            ),
        )

    def end_session(
        self,
        session_key: str,
        *,
        request_id: str | None = None,
        agent_name: str | None = None,
        reason: str | None = None,
    ) -> bool:
        """A conversation (the requests sharing `session_key`) ended: its session verdict is
        made final now instead of after the worker's idle time. `agent_name`: the agent whose
        session it is (sessions are per agent); `request_id`: the session's last request, whose
        turn the final verdict waits for (`req.end_session()` sends both). A request of the
        session after this resumes it (a new revision). False when not sent (bad arguments
        are logged and counted in `dropped`). Never raises."""
        return self._made(
            "a session end", lambda: session_end_event(session_key, request_id, agent_name, reason)
        )

    def _made(self, what: str, make: Callable[[], dict[str, Any]]) -> bool:
        """Send the event `make` builds; one it refuses is dropped and counted, never raised."""
        try:
            event = make()
        except InvalidEvent as exc:
            # the reason names the field, never the request: one warning per interval for all
            self._sender.drop(f"{what} refused: {exc.reason}")
            return False
        except Exception as exc:  # whatever was passed, the agent goes on
            self._sender.drop(f"{what} refused: {type(exc).__name__}: {exc}")
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

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()

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
        recorded as the final response, so the request is judged rather than left open
        (`InterventionStop`, from `req.raise_if_stopped()`, as stopped by its intervention);
        the exception goes on up."""
        recorder = self.request(goal, **kwargs)
        try:
            yield recorder
        except Exception as exc:
            if not recorder.finished:
                _final_for(recorder, exc)
            raise

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything handed over was acknowledged; False if `timeout` passed
        first (what is left stays buffered)."""
        return self._sender.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Flush within `timeout`, then stop sending and reading interventions. Also done at
        interpreter exit."""
        self._sender.close(timeout)
        self._close_reader()

    def early_stop(
        self, request: str | Recorder, since: float | None = None
    ) -> EarlyStopDecision | None:
        """tracejudge's early-stop decision for an iterative request, if one was made (Redis).
        Given the request's recorder, only a decision made for this run of it is taken (its
        nonce, and no older than its start); given a request id, `since`: when this run of it
        began (a decision older than that is refused)."""
        if self.redis_url is None:
            return None
        if self._early is None:
            self._early = EarlyStopClient(
                self.redis_url,
                control_keys=self._control_keys,
                topic_prefix=self.topic_prefix,
                latest=self._latest,  # one memory of the newest decision per request
            )
        return self._early.check(*_run_of(request, since))

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
                _final_for(recorder, exc)
            raise

    # `timeout` in seconds, as in the synchronous Tracer: one API for both flavours
    async def flush(self, timeout: float = 10.0) -> bool:  # noqa: ASYNC109
        return await asyncio.to_thread(self._sender.flush, timeout)

    async def close(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        await asyncio.to_thread(self._sender.close, timeout)
        await asyncio.to_thread(self._close_reader)

    async def early_stop(
        self, request: str | Recorder, since: float | None = None
    ) -> EarlyStopDecision | None:
        """As `Tracer.early_stop`."""
        if self.redis_url is None:
            return None
        client = AsyncEarlyStopClient(
            self.redis_url,
            control_keys=self._control_keys,
            topic_prefix=self.topic_prefix,
            latest=self._latest,  # one memory of the newest decision per request
        )
        try:
            return await client.check(*_run_of(request, since))
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


_said_unverified = False


def _run_of(request: str | Recorder, since: float | None) -> tuple[str, float | None, str | None]:
    """(request id, since, run nonce) for an early-stop check of `request`."""
    if isinstance(request, Recorder):
        return request.request_id, request.started_at if since is None else since, request.run_nonce
    return request, since, None


def _say_unverified() -> None:
    """Once per process: a tracer that acts on control records nobody signed."""
    global _said_unverified
    if not _said_unverified:
        _said_unverified = True
        log.warning(
            "tracejudge client: interventions are not verified (no control keys: "
            "TRACEJUDGE_CONTROL_KEYS): whoever can write to the control topic can stop this agent"
        )
