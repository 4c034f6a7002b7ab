"""Interventions reach the agent while it runs: budgets crossed and loops found.

The worker publishes an `Intervention` on the control topic the moment a run's event crosses a
loop rule or its budget. A tracer reads them back for its own requests, on a thread of its own,
so the agent never waits for them: between two steps it asks its recorder, a dict read.

    with tracer.traced("fix the failing test") as req:
        while not done:
            do_one_step(req)                         # records its tool_call / reasoning
            if req.should_stop():                    # never blocks
                req.final("stopped: " + req.stop_reason.message,
                          stopped_by=req.stop_reason.intervention_id)
                break

Or be called as soon as one arrives: `tracer.request(goal, on_intervention=fn)`; `fn` runs on
the reader's thread (an asyncio agent hands it over with `loop.call_soon_threadsafe`).
`req.raise_if_stopped()` raises `InterventionStop`, the exception the framework integrations
raise too.

An intervention with `action == "steer"` is a message for the agent, not an order to stop: the
run goes on, `should_stop()` stays False. Its words belong in the agent's next model call, so
they are taken where that call's input is built: `req.pending_steers()` returns the steers not
handed out yet, each once (to one caller, whichever thread asks), and `steer_text(steer)` is
what the model is told (the worker's `message` and its `evidence`):

    for steer in req.pending_steers():               # never blocks; empty most of the time
        messages.append({"role": "user", "content": steer_text(steer)})

`on_intervention` is called for steers too, but on the reader's thread, at any moment of the
run: it cannot put anything into a model call, and hands nothing out (`pending_steers()` still
returns what it was told of). The LangChain handler and the Agents SDK processor take steers
into the next model call themselves (client/integrations/). An agent that only reads a
`RequestWatch` (`InterventionReader.watch`) has the same `watch.take_steers()`.

The reader joins no consumer group and commits nothing: one librdkafka consumer assigned to
every partition of the control topic, from a few seconds before it started (an intervention
published while it connected is not missed). Early-stop decisions and other requests'
interventions share the topic and are skipped by their key, before any parsing. A broker away
or a topic not there yet never raises into the agent: the reader retries and logs at most once
per interval. `Tracer(..., interventions=False)` never starts it.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pydantic import ValidationError

from tracejudge.client.control_metrics import export_counts
from tracejudge.client.transport import kafka_config
from tracejudge.models.outputs import Intervention
from tracejudge.models.signing import ControlKeys, signed_with

log = logging.getLogger("tracejudge.client")

OnIntervention = Callable[[Intervention], object]  # what it returns is ignored

LOOK_BACK_S = 5.0  # before the reader started: what was published while it connected
GRACE_S = 10.0  # after a request's final: an intervention on its last steps still lands
MAX_WATCHED = 10_000  # requests watched at once per tracer; past it the oldest is forgotten
LOOKUP_S = 1.0  # one metadata or offsets lookup; retried with a backoff when it fails
MAX_PER_REQUEST = 64  # interventions kept per request (the worker sends at most one per kind)
# A signed intervention issued this long before its request was watched is a replay from an
# earlier run of the same id, not this run's: the worker's and the agent's clocks may differ
# by this much.
CLOCK_SKEW_S = 30.0


# Who is speaking, for the model that reads a steer in its input among the user's messages.
STEER_PREFIX = "Note from tracejudge, which watches this run:"


# what a steer may name besides the worker's message: a rule's or a check's identifier
_IDENTIFIER = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def steer_text(steer: Intervention) -> str:
    """What the agent's model is told for a steer: the worker's own message (its fixed words,
    and the rule or check by name) and where it was crossed, never text from the run. The
    evidence (the run's arguments and results, a check's own words) stays on `steer.evidence`
    for the agent's code: handed to the model, a tool result saying "ignore all previous
    instructions" would be an instruction from us."""
    text = f"{STEER_PREFIX} {steer.message.strip()}"
    said = []
    if _IDENTIFIER.fullmatch(steer.crossed or ""):
        said.append(f"{steer.kind} {steer.crossed}")
    if steer.step_index is not None:
        said.append(f"at step {steer.step_index}")
    return f"{text} ({', '.join(said)})" if said else text


def another_run(given: str | None, ours: str | None) -> bool:
    """Whether a control record names a run (its `run_nonce`) other than ours. A record that
    names none is from a worker, or events, without nonces: the time rule alone judges it."""
    return given is not None and ours is not None and given != ours


class InterventionStop(Exception):
    """The run was told to stop; `.intervention` says by what (budget or loop) and why."""

    def __init__(self, intervention: Intervention) -> None:
        super().__init__(intervention.message)
        self.intervention = intervention


@dataclass(slots=True)
class RequestWatch:
    """What one request has been told so far. Written by the reader's thread only; the
    recorder reads it (a list append and an attribute set are atomic under the GIL), and
    takes its steers under a lock of their own (`take_steers`)."""

    request_id: str
    on_intervention: OnIntervention | None = None
    since: float = field(default_factory=time.time)  # when it began to be watched
    run_nonce: str | None = None  # this run's: a record signed for another run is refused
    interventions: list[Intervention] = field(default_factory=list)
    stop: Intervention | None = None  # the first with action "stop"
    # what the reader did with this request's control records: sent with its final response
    # (`seen`), so the worker can show an operator an agent whose keys differ from its own
    refused: dict[str, int] = field(default_factory=dict)
    unverified: int = 0
    _ids: set[str] = field(default_factory=set)
    _handed: set[str] = field(default_factory=set)  # steers given to the agent, by id
    _handing: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def seen(self, verifies: bool) -> dict[str, Any]:
        """What was done with this request's control records: the final response's `control`."""
        return {
            "verifies": verifies,
            "delivered": len(self.interventions),
            "refused": dict(self.refused),
            "unverified": self.unverified,
            "read": [
                i.intervention_id for i in self.interventions if i.intervention_id in self._handed
            ][:32],
        }

    def take_steers(self) -> list[Intervention]:
        """The steers that arrived and were not taken yet, in order: each is taken once, by
        whichever caller (of any thread) asks first."""
        with self._handing:
            new = [
                i
                for i in list(self.interventions)  # the reader's thread may append meanwhile
                if i.action == "steer" and i.intervention_id not in self._handed
            ]
            self._handed.update(i.intervention_id for i in new)
        return new


class InterventionReader:
    """One per tracer: started on the first `watch`, stopped by `close` (and at exit)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        options: dict[str, Any] | None = None,
        *,
        fetch_wait_ms: int = 100,
        grace_s: float = GRACE_S,
        max_watched: int = MAX_WATCHED,
        warn_interval_s: float = 60.0,
        keys: ControlKeys | None = None,
    ) -> None:
        """`keys`: what verifies the interventions (the worker's TRACEJUDGE_CONTROL_KEYS); an
        intervention none of them signed is dropped and counted in `rejected`. None: every
        well-formed one is taken, as from a worker that signs nothing."""
        self.topic = topic
        self.keys = keys
        self.grace_s = grace_s
        self.max_watched = max_watched
        self.warn_interval_s = warn_interval_s
        self.config: dict[str, Any] = {
            **kafka_config(bootstrap, options or {}),  # an unknown option: a TypeError now
            # required by librdkafka; never joined (assign, not subscribe), never committed
            "group.id": f"tracejudge-interventions-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # the broker answers a waiting fetch as soon as one byte is there (measured: the
            # same latency at 10 and 500 ms); the wait bounds it on brokers that do not, and
            # sets how often an idle reader asks
            "fetch.wait.max.ms": fetch_wait_ms,
            "fetch.min.bytes": 1,
            "reconnect.backoff.max.ms": 5000,
            "log_level": 2,  # librdkafka would repeat itself every reconnect: error_cb says it
            "error_cb": self._on_error,
        }
        self.config.setdefault("client.id", "tracejudge-client-interventions")
        self.delivered = 0  # interventions handed to watched requests
        self.rejected = 0  # interventions for watched requests dropped: unsigned, forged, stale
        self.unreadable = 0  # control messages for watched requests that could not be read
        self.unsigned = 0  # of `rejected`, those with no signature at all
        # of `rejected`, by why (models/events.py: REFUSALS); and signed records taken without
        # a check because this agent holds no key (`keys` None)
        self.refused: dict[str, int] = {}
        self.unverified = 0
        self.restarts = 0  # times the reader's thread was found dead and started again
        self._watched: dict[str, RequestWatch] = {}
        # (monotonic time to forget it, request id), in that order: the grace is one value
        self._ending: deque[tuple[float, str]] = deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._pid = os.getpid()
        self._closed = False
        self._started_at = 0.0
        self._warned_at: dict[str, float] = {}

    @property
    def running(self) -> bool:
        """Whether the reader's thread is alive (a dead one is started again on the next
        `watch`, and counted in `restarts`)."""
        return self._thread is not None and self._thread.is_alive()

    def keep_alive(self) -> None:
        """Start the reader's thread again if it died (counted in `restarts`): called by a
        recorder each time its agent asks whether to stop, so a run does not go unwatched
        until the next request. A thread-liveness look when all is well."""
        if not self._closed and self._thread is not None and not self.running:
            self._ensure_started()

    def watch(
        self,
        request_id: str,
        on_intervention: OnIntervention | None = None,
        *,
        run_nonce: str | None = None,
    ) -> RequestWatch:
        """Start keeping `request_id`'s interventions (and starts the reader, the first time).
        `run_nonce`: the run's (its events' `run_nonce`): an intervention made for another run
        of the same request id (it carries that run's nonce) is refused."""
        watch = RequestWatch(request_id, on_intervention, run_nonce=run_nonce)
        if self._closed:
            return watch  # answers "nothing arrived", as a recorder without a reader does
        with self._lock:
            self._watched.pop(request_id, None)  # watched again: now the newest
            self._watched[request_id] = watch
            if len(self._watched) > self.max_watched:  # an agent that never calls final
                del self._watched[next(iter(self._watched))]
        self._ensure_started()
        return watch

    def forget(self, request_id: str, grace_s: float | None = None) -> None:
        """Stop keeping `request_id` after `grace_s` (default: the reader's grace)."""
        grace = self.grace_s if grace_s is None else grace_s
        with self._lock:
            if request_id in self._watched:
                self._ending.append((time.monotonic() + grace, request_id))

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the reader's thread (which closes its consumer). Idempotent."""
        self._closed = True
        _OPEN.discard(self)
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout_s)
        with self._lock:
            self._watched.clear()
            self._ending.clear()

    def _ensure_started(self) -> None:
        if self.running and self._pid == os.getpid():
            return
        with self._lock:
            if self.running and self._pid == os.getpid():
                return
            if self._thread is not None and self._pid == os.getpid():
                # it died (nothing should kill it): started again, said, counted
                self.restarts += 1
                log.warning("tracejudge client: the interventions reader had stopped; restarted")
                self._stopping = threading.Event()
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._pid, self._stopping = os.getpid(), threading.Event()
            self._started_at = time.time()
            self._thread = threading.Thread(
                target=self._run,
                args=(self._stopping,),
                name="tracejudge-interventions",
                daemon=True,
            )
            self._thread.start()
            _OPEN.add(self)
        export_counts(self)  # the agent's own metrics, where it has OpenTelemetry's API

    # --- the reader's thread -------------------------------------------------------------

    def _run(self, stopping: threading.Event) -> None:
        consumer: Consumer | None = None
        backoff = 0.2
        try:
            while not stopping.is_set():
                self._forget_ended()  # also while the broker is away: memory stays bounded
                try:
                    if consumer is None:
                        consumer = Consumer(self.config)
                    if not consumer.assignment():
                        self._assign(consumer, stopping)
                        backoff = 0.2
                    # poll returns with the first message; consume(n, timeout) would wait out
                    # its whole timeout unless n arrived (librdkafka's batch call): up to
                    # 100 ms added to every intervention. What else is queued is drained
                    # without waiting.
                    first = consumer.poll(0.1)
                    messages = [] if first is None else [first, *consumer.consume(499, 0)]
                except (KafkaException, _NotYet) as exc:
                    self._warn("assign", f"cannot read {self.topic} yet ({exc}); retrying")
                    stopping.wait(backoff)
                    backoff = min(5.0, backoff * 2)
                    continue
                except Exception:  # never let the agent's process lose the reader silently
                    log.exception("tracejudge client: the interventions reader failed; retrying")
                    stopping.wait(1.0)
                    continue
                for message in messages:
                    if message.error() is None:
                        self._take_safely(message.key(), message.value())
        finally:
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:  # closing after an outage may fail: nothing to keep
                    log.debug("tracejudge client: closing the interventions consumer failed")

    def _assign(self, consumer: Consumer, stopping: threading.Event) -> None:
        """Every partition, from LOOK_BACK_S before the reader started. Each lookup waits at
        most LOOKUP_S, so a close while the broker is away is not held up for long."""
        metadata = consumer.list_topics(self.topic, timeout=LOOKUP_S)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise _NotYet(str(topic.error) if topic is not None else "no such topic")
        partitions = sorted(topic.partitions)
        # the ends first: one published between the two lookups is at or after the end
        ends: dict[int, int] = {}
        for p in partitions:
            if stopping.is_set():
                return
            low_high = consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=LOOKUP_S
            )
            if low_high is None:
                raise _NotYet(f"no offsets for partition {p}")
            ends[p] = low_high[1]
        since = int((self._started_at - LOOK_BACK_S) * 1000)
        found = consumer.offsets_for_times(
            [TopicPartition(self.topic, p, since) for p in partitions], timeout=LOOKUP_S
        )
        consumer.assign(
            [
                TopicPartition(self.topic, tp.partition, tp.offset if tp.offset >= 0 else ends[p])
                for p, tp in zip(partitions, found, strict=True)
            ]
        )

    def _take_safely(self, key: bytes | None, value: bytes | None) -> None:
        """`_take`, and whatever one record makes it raise is that record's loss only: the
        reader goes on for every other request of the process."""
        try:
            self._take(key, value)
        except Exception:
            self.unreadable += 1
            self._warn(
                "unreadable", f"a control message on {self.topic} could not be read; skipped"
            )

    def _take(self, key: bytes | None, value: bytes | None) -> None:
        """One control message: kept when it is an intervention for a watched request."""
        if not key or not value:
            return
        watch = self._watched.get(key.decode("utf-8", "replace"))
        if watch is None:  # another request's, or an early-stop decision: not even parsed
            return
        try:
            raw = json.loads(value)
            if not isinstance(raw, dict) or raw.get("type") != "intervention":
                return
            intervention = Intervention.model_validate(raw)
        except (
            ValueError,
            RecursionError,
            ValidationError,
        ):  # not of this contract: skipped, counted, not fatal
            self.unreadable += 1
            self._warn("invalid", f"an unreadable control message on {self.topic}; skipped")
            return
        why = self._refusal(raw, intervention, watch)
        if why is not None:
            self.rejected += 1
            self.unsigned += int(why == "unsigned")
            self.refused[why] = self.refused.get(why, 0) + 1
            watch.refused[why] = watch.refused.get(why, 0) + 1
            self._warn(why, f"an intervention on {self.topic} {self._words(why, raw)}; dropped")
            return
        if self.keys is None and raw.get("signature"):
            # signed by a worker, taken unchecked: anyone who can write the topic could stop
            # this agent, and a key mismatch would go unseen
            self.unverified += 1
            watch.unverified += 1
            self._warn(
                "unverified",
                f"a signed intervention on {self.topic} (key {signed_with(raw)}) obeyed "
                "without checking it: this agent has no TRACEJUDGE_CONTROL_KEYS",
            )
        if (
            intervention.request_id != watch.request_id
            or intervention.intervention_id in watch._ids
            or len(watch.interventions) >= MAX_PER_REQUEST
        ):
            return
        watch._ids.add(intervention.intervention_id)
        watch.interventions.append(intervention)
        if intervention.action == "stop" and watch.stop is None:
            watch.stop = intervention
        self.delivered += 1
        if watch.on_intervention is not None:
            try:
                watch.on_intervention(intervention)
            except Exception:  # the agent's code: logged, and the reader goes on
                log.exception("tracejudge client: an on_intervention callback raised")

    def _refusal(
        self, raw: dict[str, Any], intervention: Intervention, watch: RequestWatch
    ) -> str | None:
        """Why the record is refused (models/events.py: REFUSALS), None when it is taken."""
        if another_run(intervention.run_nonce, watch.run_nonce):
            # made for an earlier run of the same request id (read back, or replayed): the
            # nonce is signed, so a forger cannot move a record to this run
            return "other_run"
        if self.keys is None:
            return None
        if not self.keys.verify(raw):
            return self.keys.why_not(raw)
        return "stale" if intervention.ts < watch.since - CLOCK_SKEW_S else None

    def _words(self, why: str, raw: dict[str, Any]) -> str:
        """What the refusal means, with what to look at: the worker's mistake as often as a
        forger's, so each is said apart."""
        held = ", ".join(self.keys.key_ids) if self.keys is not None else "none"
        named = signed_with(raw)
        return {
            "other_run": "of another run of this request id",
            "unsigned": "with no signature: is the worker's TRACEJUDGE_CONTROL_KEYS set? (or "
            "someone else wrote it)",
            "unknown_key": f"signed with key {named}, which this agent does not hold (its "
            f"keys: {held}): the worker's TRACEJUDGE_CONTROL_KEYS and this agent's differ",
            "expired_key": f"signed with key {named}, past the last day this agent gives it",
            "bad_signature": f"signed with key {named}, which this agent holds, but the "
            "signature does not match: another deployment's record, or forged",
            "stale": "signed, but older than its run",
        }.get(why, why)

    def counts(self) -> dict[str, int]:
        """The reader's tallies since it started, for the agent's own metrics: `delivered`,
        `unverified`, `unreadable`, and `refused_<why>` for each refusal (models/events.py:
        REFUSALS)."""
        found = {
            "delivered": self.delivered,
            "unverified": self.unverified,
            "unreadable": self.unreadable,
        }
        return found | {f"refused_{why}": n for why, n in sorted(self.refused.items())}

    def _forget_ended(self) -> None:
        """The requests whose grace is over (a request watched again since keeps its new
        watch only if that one was not finished: the same id run twice is rare)."""
        now = time.monotonic()
        while self._ending and self._ending[0][0] <= now:
            with self._lock:
                _, request_id = self._ending.popleft()
                self._watched.pop(request_id, None)

    def _on_error(self, error: KafkaError) -> None:
        self._warn("broker", f"Kafka: {error.str()}; interventions are read once it answers")

    def _warn(self, kind: str, text: str) -> None:
        now = time.monotonic()
        if now - self._warned_at.get(kind, -1e9) < self.warn_interval_s:
            return
        self._warned_at[kind] = now
        log.warning("tracejudge client: %s", text)


class _NotYet(Exception):
    """The control topic has no partitions to read yet (the worker creates it at start)."""


_OPEN: weakref.WeakSet[InterventionReader] = weakref.WeakSet()


def _close_at_exit() -> None:
    for reader in list(_OPEN):
        if reader._pid == os.getpid():
            reader.close(1.0)


atexit.register(_close_at_exit)
