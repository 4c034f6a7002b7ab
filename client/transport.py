"""The client's way to Kafka: a buffer the agent hands events to, and never waits on.

librdkafka (through confluent-kafka) does the sending on threads of its own: batches (linger,
batch size, compression), retries with idempotence (a retried batch is written once), and
buffering while no broker answers. So the agent's cost per event is one JSON encoding and one
enqueue, a few microseconds; nothing here connects when it is made, and nothing a broker does
raises into the agent. What cannot be kept is dropped and counted: the newest event when the
buffer is full (bounded in events and bytes), and an event the broker has not taken within the
delivery timeout. Drops and an unreachable broker are logged at most once per interval.

A process that forks gets a fresh producer in the child on its first event (librdkafka's
threads do not survive a fork; the parent keeps and delivers what it had buffered). At
interpreter exit every sender still open flushes, within its exit timeout.

A new producer's first events wait for its producer id (idempotence), which librdkafka asks
for after a metadata answer, and, when no broker connection is up at that moment, again only
500 ms later: the first answer comes from the bootstrap address, before the connection to the
broker it names is up, so a new tracer's first request reached the worker 0.5-1 s late (and
was told of a stop that late). From its first event until its first delivery, a producer
looks its topic up again (`_prime`): the answer that comes over the new connection gets the
id at once, and the first events leave within the connections' own time.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Producer

log = logging.getLogger("tracejudge.client")

PRIME_S = 1.0  # the longest a new producer's topic is looked up again for its first delivery
PRIME_LOOKUP_S = 0.1  # one lookup's wait
PRIME_EVERY_S = 0.005  # between lookups

# aiokafka-style names that agents pass today, and librdkafka's names for them; any option
# already spelled the librdkafka way (with dots) is passed on as it is
OPTION_NAMES = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    "client_id": "client.id",
}


def kafka_config(bootstrap: str, options: dict[str, Any]) -> dict[str, Any]:
    """librdkafka settings from the agent's options; an unknown name is a TypeError at once,
    not a surprise at the first send."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    for name, value in options.items():
        if "." in name:
            config[name] = value
        elif name in OPTION_NAMES:
            config[OPTION_NAMES[name]] = value
        else:
            raise TypeError(
                f"unknown Kafka option {name!r}: use one of {sorted(OPTION_NAMES)} or a "
                "librdkafka setting name (with dots, e.g. 'socket.timeout.ms')"
            )
    return config


class Sender:
    """Hands encoded events to one topic. Thread-safe; `offer` never blocks and never raises."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        queue_size: int = 100_000,
        queue_bytes: int = 64 * 1024 * 1024,
        linger_ms: float = 20.0,
        batch_bytes: int = 1_000_000,
        compression: str = "none",
        delivery_timeout_s: float = 600.0,
        warn_interval_s: float = 60.0,
        exit_timeout_s: float = 5.0,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.warn_interval_s = warn_interval_s
        self.exit_timeout_s = exit_timeout_s
        self.config = {
            **kafka_config(bootstrap, options or {}),
            "acks": "all",
            # the Java client's partitioner, as aiokafka and Faust use: a request's events
            # land on one partition whichever of our producers sent them
            "partitioner": "murmur2_random",
            "enable.idempotence": True,  # a batch retried after a lost ack is written once
            "linger.ms": linger_ms,
            "batch.size": batch_bytes,
            "compression.type": compression,
            "queue.buffering.max.messages": queue_size,
            "queue.buffering.max.kbytes": max(1, queue_bytes // 1024),
            "message.timeout.ms": int(delivery_timeout_s * 1000),  # an outage this long is bridged
            "reconnect.backoff.max.ms": 5000,
            "log_level": 2,  # librdkafka's own lines would repeat every reconnect: error_cb says it
            "error_cb": self._on_error,
            "on_delivery": self._on_delivery,
        }
        self.config.setdefault("client.id", "tracejudge-client")
        self.sent = 0
        self.dropped = 0
        self.handed = 0  # events the producer took; less sent and failed: still buffered
        self._failed = 0
        self._lock = threading.Lock()
        self._producer: Producer | None = None
        self._pid = os.getpid()
        self._poller: threading.Thread | None = None
        self._stopping = threading.Event()
        self._closed = False
        self._primed = False  # the producer's first event started `_prime`
        self._warned_at: dict[str, float] = {}
        self._unwarned: dict[str, int] = {}
        # librdkafka connects only once there is something to send: made now, a bad setting
        # fails here rather than at the first event
        self._start()
        _OPEN.add(self)

    @property
    def queued(self) -> int:
        """Events handed over and not yet acknowledged by the broker."""
        return max(0, self.handed - self.sent - self._failed)

    def offer(self, key: bytes, value: bytes) -> bool:
        """Hand one event over; False when it was dropped (and counted) instead."""
        if self._closed:
            self.drop("the tracer is closed")
            return False
        producer = self._producer
        if producer is None or self._pid != os.getpid():
            producer = self._start()
        try:
            with self._lock:  # agents may record from several threads
                producer.produce(self.topic, value, key)
                self.handed += 1
                prime, self._primed = not self._primed, True
        except BufferError:
            self.drop("the client's buffer is full (the broker is away or slower than the agent)")
            return False
        except Exception as exc:  # e.g. a record over the size limit: the agent goes on
            self.drop(f"{type(exc).__name__}: {exc}")
            return False
        if prime:  # the producer's first event
            with contextlib.suppress(RuntimeError):  # no thread to be had: the 0.5 s wait
                threading.Thread(
                    target=self._prime,
                    args=(producer, self._stopping),
                    name="tracejudge-client-prime",
                    daemon=True,
                ).start()
        return True

    def flush(self, timeout_s: float) -> bool:
        """Wait until the broker acknowledged everything handed over; False if `timeout_s`
        passed first (what is left stays buffered)."""
        producer = self._producer
        if producer is None or self._pid != os.getpid():
            return True
        return bool(producer.flush(max(0.0, timeout_s)) == 0)

    def close(self, timeout_s: float) -> None:
        """Flush within `timeout_s`, then stop; what is still unsent is counted as dropped."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        if self._producer is None or self._pid != os.getpid():
            return
        if not self.flush(timeout_s):
            left = self.queued
            with self._lock:  # given up: no longer buffered
                self._failed += left
            self.drop(f"not delivered within {timeout_s:g} s of close", left, force=True)
        self._stopping.set()
        if self._poller is not None:
            self._poller.join(timeout=2.0)
        self._producer = None

    def drop(self, reason: str, count: int = 1, *, force: bool = False) -> None:
        with self._lock:
            self.dropped += count
        self._warn(
            reason,
            count,
            lambda n: (
                f"tracejudge client: dropped {n} event(s) ({reason}); {self.dropped} dropped in all"
            ),
            force=force,
        )

    def _warn(
        self, kind: str, count: int, render: Callable[[int], str], *, force: bool = False
    ) -> None:
        """Log at most once per interval for each kind of trouble, with the count since."""
        now = time.monotonic()
        with self._lock:
            waiting = self._unwarned.get(kind, 0) + count
            if not force and now - self._warned_at.get(kind, -1e9) < self.warn_interval_s:
                self._unwarned[kind] = waiting
                return
            self._warned_at[kind] = now
            self._unwarned[kind] = 0
        log.warning("%s", render(waiting))

    def _start(self) -> Producer:
        with self._lock:
            if self._producer is not None and self._pid == os.getpid():
                return self._producer
            if self._pid != os.getpid():  # a forked child: the parent's producer is not ours
                _ABANDONED.append(self._producer)  # its destructor would wait on dead threads
                self._pid, self._stopping = os.getpid(), threading.Event()
            producer = Producer(self.config)
            self._primed = False
            self._poller = threading.Thread(
                target=self._poll, args=(producer, self._stopping), name="tracejudge-client"
            )
            self._poller.daemon = True  # the exit flush below delivers what is left
            self._poller.start()
            self._producer = producer
            return producer

    def _poll(self, producer: Producer, stopping: threading.Event) -> None:
        """Serves librdkafka's callbacks (deliveries, errors) off the agent's threads."""
        while not stopping.is_set():
            try:
                producer.poll(0.2)
            except Exception:  # a callback of ours failed: never stop serving the rest
                log.exception("tracejudge client: a delivery callback failed")

    def _prime(self, producer: Producer, stopping: threading.Event) -> None:
        """A new producer's topic looked up until its first delivery (at most PRIME_S): see
        the module's docstring. On its own thread: the agent never waits for it."""
        deadline = time.monotonic() + PRIME_S
        delivered = self.sent
        while self.sent == delivered and time.monotonic() < deadline and not stopping.is_set():
            try:
                producer.list_topics(self.topic, timeout=PRIME_LOOKUP_S)
            except Exception:  # the broker away: the events wait as they would anyway
                stopping.wait(PRIME_LOOKUP_S)
            stopping.wait(PRIME_EVERY_S)

    def _on_delivery(self, error: KafkaError | None, _message: Any) -> None:
        if error is None:
            with self._lock:  # served by the poller, and by flush() on the agent's thread
                self.sent += 1
        else:
            with self._lock:
                self._failed += 1
            self.drop(f"not delivered: {error.str()}")

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():  # e.g. the idempotent producer's state was lost: start a new one
            log.error("tracejudge client: Kafka producer failed (%s); starting a new one", error)
            with self._lock:
                if self._producer is not None:
                    _ABANDONED.append(self._producer)
                    self._producer = None
            return
        self._warn(
            "broker",
            1,
            lambda _n: (
                f"tracejudge client: Kafka at {self.config['bootstrap.servers']}: "
                f"{error.str()}; events stay buffered ({self.queued} now)"
            ),
        )


# senders still open, for the exit flush and the fork hook; weak, so a dropped tracer goes
_OPEN: weakref.WeakSet[Sender] = weakref.WeakSet()
_ABANDONED: list[Any] = []  # producers of a parent process, never destroyed in the child


def _flush_at_exit() -> None:
    for sender in list(_OPEN):
        if sender._pid == os.getpid():
            sender.close(sender.exit_timeout_s)


def _after_fork_in_child() -> None:
    for sender in list(_OPEN):
        sender._lock = threading.Lock()  # another thread may have held it at the fork


atexit.register(_flush_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
