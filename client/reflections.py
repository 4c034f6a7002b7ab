"""The agent's side of a reflection: take tracejudge's reflection requests, finish the work.

    from tracejudge.client.reflections import ReflectionWorker

    def finish(reflection: Reflection, run: Recorder) -> str:
        for left in reflection.remaining:         # e.g. refund: step 2 failed ('timeout')
            ...                                   # do left.step, recording into `run`
        return "Done: ..."                       # the follow-up's final response

    ReflectionWorker("kafka:9092", finish, agents=["booking-agent"]).run()

Each process runs one worker; several processes with the same `group_id` share the requests
(Kafka's consumer group: parallelism is more processes, not threads). For each request of an
agent it serves, the worker starts the follow-up run (`task_started` with `parent_request_id`
and `reflection_round`, its planned steps the origin's remaining steps), hands the callback a
`Reflection` and the run's `Recorder`, and sends the callback's return value as the final
response. Then, and only then, it commits the request's offset.

Delivery is at-least-once, so the follow-up's request id is derived from the `reflection_id`:
a request delivered twice (a process killed before its commit) is run again under the *same*
id, never as a second follow-up. Its `task_started` has the same event id both times, which the
tracejudge worker drops as a duplicate; the redone run's later steps carry a per-run token in
their event ids, so they are kept beside the interrupted run's rather than taken for them.

Failures never stop the worker:
- a callback that raises is retried (`attempts` in all, `retry_backoff_s` apart) on the same
  run, each failure recorded in it as a reasoning step with its error; after the last one the
  run gets a `failed: ...` final response (so it is judged, as `traced` does), the failure is
  logged and counted (`stats.failed`), and the offset is committed: a poison request is
  skipped, not retried forever.
- a callback runs on a thread of its own, bounded by `callback_timeout_s`. Python cannot stop a
  thread, so one that does not return in time is abandoned: it keeps running as a daemon
  (never delaying the process's exit), whatever it records afterwards is dropped, its return
  value is ignored, and it is counted (`stats.timed_out`; `stats.abandoned` while it is alive).
  It is not retried: a callback that hung once would likely hang again, and each retry would
  leave one more thread behind. The run gets a `failed: ... timed out` final response.
- a request that is not valid, for another agent, beyond `max_rounds`, or older than
  `max_age_s` is counted and committed without a callback.

Generic-answer retries (`retry_request` on the retries topic) are not served here, by decision.
A retry continues one chat session, keyed by `session_id`, seconds after the answer, while the
user waits: only the process that holds that session can send the continue prompt into it,
whereas a consumer group hands each message to whichever process owns its partition. The
agent that published the answer is where a retry belongs, read inline as `early_stop` is (a
later client API), not through a shared worker. A reflection, in contrast, is a new run
(its own request id) that any process of the agent can do from what the request carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from pydantic import ValidationError

from tracejudge.client.events import Recorder
from tracejudge.client.tracer import Tracer
from tracejudge.client.transport import kafka_config
from tracejudge.models.ids import stable_id
from tracejudge.models.names import REFLECTIONS
from tracejudge.models.outputs import FailedStep, ReflectionRequest, RemainingStep

log = logging.getLogger("tracejudge.client")


@dataclass(frozen=True)
class Reflection:
    """What a callback needs to finish the job, from one reflection request."""

    reflection_id: str
    origin_request_id: str  # the run that was judged incomplete
    request_id: str  # the follow-up's, derived from reflection_id
    round: int  # 1 for the first follow-up of an origin, 2 for a follow-up's follow-up, ...
    goal: str
    summary: str  # the verdict's summary of the origin
    remaining_steps: tuple[str, ...]  # `remaining`, a line each
    failed_steps: tuple[FailedStep, ...]
    suggestions: tuple[str, ...]
    agent_name: str | None
    session_key: str | None
    task_id: str | None
    attempt: int  # 1 for the first call in this process, 2 for its first retry, ...
    # the work left, step by step: `.step` (the tool to call again, the planned step as
    # declared), `.why`, and for a failed call its `.tool`, `.args` and `.error`; from a
    # worker older than this field, each of `remaining_steps` as a step of its own
    remaining: tuple[RemainingStep, ...] = ()


# returns the follow-up's final response; None when the callback called `run.final` itself
# (or leaves the run to close by the idle timeout). An `async def` callback is run to its end
# on an event loop of its own, on the callback's thread (an async agent's `Runner.run`...)
ReflectionCallback = Callable[[Reflection, Recorder], str | Awaitable[str | None] | None]


def follow_up_request_id(reflection_id: str) -> str:
    """The follow-up's request id: the same for every delivery of one reflection request."""
    return "reflection-" + stable_id("follow-up", reflection_id)


@dataclass
class ReflectionStats:
    """What the worker did, for the agent's own metrics and for tests."""

    handled: int = 0  # callback returned (possibly after retries); offset committed
    retried: int = 0  # callback calls that raised and were tried again
    failed: int = 0  # raised on every attempt: reported and skipped
    timed_out: int = 0  # did not return within callback_timeout_s: abandoned and skipped
    other_agent: int = 0  # for an agent this worker does not serve
    over_limit: int = 0  # reflection_round above max_rounds
    stale: int = 0  # older than max_age_s
    invalid: int = 0  # not a reflection request of this contract
    abandoned: int = 0  # timed-out callback threads still running
    uncommitted: int = 0  # handled, but the commit failed: may be handed out again


class _Gate:
    """The follow-up's way to the tracer. After a timeout only the worker's own thread may
    still record (the failure's final response): a late callback thread is shut out."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._only: int | None = None

    def emit(self, event: dict[str, Any]) -> bool:
        if self._only is not None and threading.get_ident() != self._only:
            return False
        return self._tracer.emit(event)

    def shut(self) -> None:
        self._only = threading.get_ident()


class ReflectionWorker:
    """Consumes reflection requests in a consumer group and runs `callback` for each one of
    the agents named in `agents` (None: every agent). Blocking; run one per process."""

    def __init__(
        self,
        bootstrap: str,
        callback: ReflectionCallback,
        *,
        agents: Collection[str] | None,
        group_id: str | None = None,
        topic_prefix: str = "tracejudge.",
        max_rounds: int = 2,
        attempts: int = 3,
        retry_backoff_s: float = 1.0,
        callback_timeout_s: float = 300.0,
        max_age_s: float = 86_400.0,
        session_timeout_s: float = 10.0,
        agent_version: str | None = None,
        tracer: Tracer | None = None,
        team: str | None = None,
        **kafka_options: Any,
    ) -> None:
        """`group_id`: by default one per set of agents, since a worker commits (skips) the
        requests of agents it does not serve: two agents' workers must never share a group.
        `team`: the team whose principal this worker runs as (`tracejudge acls --team`): the
        default group is then `tracejudge-reflections.TEAM.<agents>`, which only that team's
        principal may join.
        `max_rounds`: the agent's own ceiling on rounds, below or at tracejudge's
        `TRACEJUDGE_MAX_REFLECTION_ROUNDS`. `tracer`: where follow-ups are recorded (one made
        from `bootstrap` and the options when not given, and closed with the worker)."""
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.callback = callback
        self.agents = None if agents is None else frozenset(agents)
        self.max_rounds = max_rounds
        self.attempts = attempts
        self.retry_backoff_s = retry_backoff_s
        self.callback_timeout_s = callback_timeout_s
        self.max_age_s = max_age_s
        self.agent_version = agent_version
        self.topic = topic_prefix + REFLECTIONS
        self.stats = ReflectionStats()
        self._own_tracer = tracer is None
        self.tracer = tracer or Tracer(bootstrap, topic_prefix=topic_prefix, **kafka_options)
        self._stopping = threading.Event()
        self._abandoned: list[threading.Thread] = []
        served = "+".join(sorted(self.agents)) if self.agents is not None else "all"
        group = group_id or (
            f"tracejudge-reflections.{team}.{served}"
            if team
            else f"tracejudge-reflections-{served}"
        )
        self.group = group
        # No poll happens while a request is handled: the group must not evict this process
        # before its slowest possible handling (every attempt timing out, the backoffs, the
        # flush) is over, or its partitions would go to another process mid-request.
        budget_s = attempts * (callback_timeout_s + retry_backoff_s) + 120.0
        self._consumer = Consumer(
            {
                **kafka_config(bootstrap, kafka_options),
                "group.id": group,
                "enable.auto.commit": False,  # committed by hand, after the callback
                # requests made while no process of the group ran yet are the ones waiting
                # longest; max_age_s keeps a first start from replaying days of them
                "auto.offset.reset": "earliest",
                # how long a killed process's partitions wait before another takes them
                "session.timeout.ms": int(session_timeout_s * 1000),
                "max.poll.interval.ms": int(max(budget_s, session_timeout_s) * 1000),
                "log_level": 2,
            }
        )
        self._consumer.subscribe([self.topic])

    def run(self, timeout_s: float | None = None) -> None:
        """Handle requests until `stop()` (or `timeout_s` passed), then close."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while not self._stopping.is_set():
                if deadline is not None and time.monotonic() >= deadline:
                    break
                self.poll(0.5)
        finally:
            self.close()

    def stop(self) -> None:
        """Ask `run` to return after the request in hand (thread- and signal-safe)."""
        self._stopping.set()

    def poll(self, timeout_s: float) -> bool:
        """Handle at most one request; True when one was read."""
        message = self._consumer.poll(timeout_s)
        if message is None:
            return False
        error = message.error()
        if error is not None:
            # e.g. the topic not made yet: the consumer goes on, the worker keeps polling
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("tracejudge reflections: Kafka: %s", error.str())
            return False
        if self.handle(message):
            try:
                self._consumer.commit(message=message, asynchronous=False)
            except KafkaException as exc:
                # e.g. a rebalance began while the callback ran: the request goes to the
                # partition's next owner again, whose follow-up has the same id
                self.stats.uncommitted += 1
                log.warning("tracejudge reflections: offset not committed: %s", exc)
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Leave the group (its partitions go to the other processes at once)."""
        self._stopping.set()
        with contextlib.suppress(RuntimeError):  # closed already
            self._consumer.close()
        if self._own_tracer:
            self.tracer.close(timeout_s)

    def handle(self, message: Message) -> bool:
        """One request, start to end; True when its offset may be committed."""
        try:
            request = ReflectionRequest.model_validate(json.loads(message.value() or b"null"))
        except (ValueError, RecursionError, ValidationError) as exc:
            self.stats.invalid += 1
            log.warning(
                "tracejudge reflections: skipped a record at %s[%d]@%d: not a reflection "
                "request (%s)",
                message.topic(),
                message.partition(),
                message.offset(),
                type(exc).__name__,
            )
            return True
        if self.agents is not None and request.agent_name not in self.agents:
            self.stats.other_agent += 1
            return True
        if request.reflection_round > self.max_rounds:
            self.stats.over_limit += 1
            log.info(
                "tracejudge reflections: %s round %d is above max_rounds %d: not run",
                request.reflection_id,
                request.reflection_round,
                self.max_rounds,
            )
            return True
        if time.time() - request.ts > self.max_age_s:
            self.stats.stale += 1
            return True
        return self._follow_up(request)

    def _follow_up(self, request: ReflectionRequest) -> bool:
        gate = _Gate(self.tracer)
        run = Recorder(
            gate.emit,
            request.goal,
            request_id=follow_up_request_id(request.reflection_id),
            agent_name=request.agent_name,
            agent_version=self.agent_version,
            session_key=request.session_key,
            # what is left, as the origin's trace named it: a follow-up that calls `refund`
            # again makes good the planned step `refund`
            planned_steps=[r.step for r in _remaining(request)],
            parent_request_id=request.request_id,
            reflection_round=request.reflection_round,
            # a fresh token per run: a redelivered request's steps get ids of their own
            run_token=uuid.uuid4().hex[:8],
        )
        for attempt in range(1, self.attempts + 1):
            reflection = _reflection(request, run.request_id, attempt)
            outcome, value = self._call(reflection, run)
            if outcome == "returned":
                if isinstance(value, str) and not run.finished:
                    run.final(value)
                self.stats.handled += 1
                return self._delivered()
            if outcome == "timeout":
                gate.shut()
                self.stats.timed_out += 1
                log.error(
                    "tracejudge reflections: the callback for %s did not return within %g s; "
                    "its thread is left running, its follow-up %s failed",
                    request.reflection_id,
                    self.callback_timeout_s,
                    run.request_id,
                )
                if not run.finished:
                    run.final(f"failed: timed out after {self.callback_timeout_s:g} s")
                return self._delivered()
            error = f"{type(value).__name__}: {value}"
            if attempt < self.attempts:
                self.stats.retried += 1
                run.reasoning(f"attempt {attempt} failed; trying again", error=error)
                if self._stopping.wait(self.retry_backoff_s * attempt):
                    return False  # stopping: not committed, another process redoes it
                continue
            self.stats.failed += 1
            log.error(
                "tracejudge reflections: the callback for %s failed %d time(s), last with %s; "
                "skipped",
                request.reflection_id,
                self.attempts,
                type(value).__name__,
            )
            if not run.finished:
                run.final(f"failed: {error}")
        return self._delivered()

    def _call(self, reflection: Reflection, run: Recorder) -> tuple[str, Any]:
        """The callback on a thread of its own, bounded by the timeout."""
        result: list[tuple[str, Any]] = []

        def target() -> None:
            try:
                value = self.callback(reflection, run)
                if inspect.isawaitable(value):  # an async callback: its own loop, this thread
                    value = asyncio.run(_awaited(value))
                result.append(("returned", value))
            except Exception as exc:  # the callback's failure is a value here
                result.append(("raised", exc))

        thread = threading.Thread(
            target=target, name=f"tracejudge-reflection-{reflection.attempt}", daemon=True
        )
        thread.start()
        thread.join(self.callback_timeout_s)
        self._abandoned = [t for t in (*self._abandoned, thread) if t.is_alive()]
        self.stats.abandoned = len(self._abandoned)
        return result[0] if result else ("timeout", None)

    def _delivered(self) -> bool:
        """The follow-up's events acknowledged before the offset is committed: a commit
        first and a crash after would lose the follow-up for good."""
        while not self.tracer.flush(5.0):
            log.warning("tracejudge reflections: follow-up events not acknowledged yet")
            if self._stopping.is_set():
                return False  # not committed: the request is redone, under the same id
        return True


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def _remaining(request: ReflectionRequest) -> tuple[RemainingStep, ...]:
    if request.remaining:
        return tuple(request.remaining)
    return tuple(  # a worker that sends only the lines
        RemainingStep(kind="request_pending", step=line, why="") for line in request.remaining_steps
    )


def _reflection(request: ReflectionRequest, request_id: str, attempt: int) -> Reflection:
    return Reflection(
        reflection_id=request.reflection_id,
        origin_request_id=request.request_id,
        request_id=request_id,
        round=request.reflection_round,
        goal=request.goal,
        summary=request.summary,
        remaining_steps=tuple(request.remaining_steps),
        remaining=_remaining(request),
        failed_steps=tuple(request.failed_steps),
        suggestions=tuple(request.suggestions),
        agent_name=request.agent_name,
        session_key=request.session_key,
        task_id=request.task_id,
        attempt=attempt,
    )
