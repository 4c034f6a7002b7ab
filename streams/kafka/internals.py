"""Every use of faust-streaming's, mode's and aiokafka's private state, in one place.

The worker relies on five pieces of these libraries' internals, each for a reason given where it
is used. They are not part of any public API, so a new release may move them: `check()` runs at
start-up and fails with one clear message naming what is missing and the versions installed,
instead of a worker that starts and then loses offsets or stalls. The versions tested are the
ranges pinned in pyproject.toml. Nothing else in the project touches a private attribute of
these libraries (tests/test_internals.py keeps it so).
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import faust
from faust.types.tuples import ack_lock

log = logging.getLogger(__name__)

LIBRARIES = ("faust-streaming", "mode-streaming", "aiokafka")


class InternalsChanged(RuntimeError):
    """An installed library no longer has a private attribute the worker relies on."""


@dataclass(frozen=True)
class Reliance:
    """`attribute` of `owner` (module:Class), used for `why`."""

    owner: str
    attribute: str
    why: str

    def present(self) -> bool:
        module, _, name = self.owner.partition(":")
        cls = getattr(__import__(module, fromlist=[name]), name)
        if any(self.attribute in vars(klass) for klass in cls.__mro__):
            return True
        # an instance attribute: assigned in one of the class's methods
        for klass in cls.__mro__:
            try:
                source = inspect.getsource(klass)
            except (OSError, TypeError):
                continue
            if f"self.{self.attribute} =" in source or f"self.{self.attribute}: " in source:
                return True
        return False


RELIANCES = (
    Reliance(
        "faust.transport.consumer:Consumer",
        "_gap",
        "forget the gap Faust records when the worker seeks back over offsets it repairs",
    ),
    Reliance(
        "faust.transport.consumer:Consumer",
        "_new_offset",
        "commit every acknowledged offset at once, never one per commit (unique_acks)",
    ),
    Reliance(
        "faust.transport.consumer:Consumer",
        "_acked",
        "commit every acknowledged offset at once, never one per commit (unique_acks)",
    ),
    Reliance(
        "faust.transport.consumer:Consumer",
        "_acked_index",
        "commit every acknowledged offset at once, never one per commit (unique_acks)",
    ),
    Reliance(
        "faust.transport.consumer:ThreadDelegateConsumer",
        "_thread",
        "reach aiokafka's consumer to shorten its fetch wait",
    ),
    Reliance(
        "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread",
        "_consumer",
        "reach aiokafka's consumer to shorten its fetch wait",
    ),
    Reliance(
        "aiokafka.consumer.consumer:AIOKafkaConsumer",
        "_fetcher",
        "shorten the fetch wait (faust's 1.5 s holds buffered partitions back)",
    ),
    Reliance(
        "aiokafka.consumer.fetcher:Fetcher",
        "_fetch_max_wait_ms",
        "shorten the fetch wait (faust's 1.5 s holds buffered partitions back)",
    ),
    Reliance(
        "aiokafka.consumer.fetcher:Fetcher",
        "_prefetch_backoff",
        "shorten the prefetch backoff (100 ms of a partition's records held back)",
    ),
    Reliance(
        "faust.transport.drivers.aiokafka:Producer",
        "_producer",
        "send early-stop decisions and retry requests without waiting out the linger",
    ),
    Reliance(
        "aiokafka.producer.producer:AIOKafkaProducer",
        "_message_accumulator",
        "send early-stop decisions and retry requests without waiting out the linger",
    ),
    Reliance(
        "aiokafka.producer.message_accumulator:MessageAccumulator",
        "_batches",
        "send early-stop decisions and retry requests without waiting out the linger",
    ),
    Reliance(
        "aiokafka.producer.message_accumulator:MessageAccumulator",
        "_waiter_future",
        "send early-stop decisions and retry requests without waiting out the linger",
    ),
    Reliance(
        "aiokafka.producer.message_accumulator:MessageBatch",
        "_builder",
        "send early-stop decisions and retry requests without waiting out the linger",
    ),
    Reliance(
        "mode.services:Service",
        "wait_first",
        "hand a fetched record to its stream inline (record_handoff.py)",
    ),
    Reliance(
        "mode.services:Service",
        "_stopped",
        "hand a fetched record to its stream inline (record_handoff.py)",
    ),
    Reliance(
        "mode.services:Service",
        "_crashed",
        "hand a fetched record to its stream inline (record_handoff.py)",
    ),
    Reliance(
        "mode.worker:Worker",
        "_schedule_shutdown",
        "put a deadline on the graceful stop (streams/worker/run.py overrides it)",
    ),
)


def versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def missing(reliances: tuple[Reliance, ...] = RELIANCES) -> Iterator[Reliance]:
    for reliance in reliances:
        try:
            present = reliance.present()
        except (ImportError, AttributeError):
            present = False
        if not present:
            yield reliance


def check(reliances: tuple[Reliance, ...] = RELIANCES) -> None:
    """At start-up: InternalsChanged naming every missing attribute and the versions."""
    gone = list(missing(reliances))
    if not gone:
        return
    installed = ", ".join(f"{name} {version}" for name, version in versions().items())
    lines = [f"{r.owner}.{r.attribute} (to {r.why})" for r in gone]
    raise InternalsChanged(
        f"the installed libraries ({installed}) lack what the worker relies on: "
        + "; ".join(lines)
        + ". Install the versions pyproject.toml pins (pip install -e . or the image)."
    )


# --- the uses ---------------------------------------------------------------------------------


def forget_gap(consumer: Any, tp: Any) -> None:
    """faust-streaming counts a jump in fetched offsets as a "gap" it commits over as if
    processed; the records the worker seeks back to are processed and acknowledged for real, and
    the gap left in place would make commits skip or (with the duplicates it adds to the
    acknowledged offsets) stick."""
    consumer._gap.pop(tp, None)


def unique_acks(consumer: Any) -> None:
    """faust-streaming computes the offset to commit from its list of acknowledged offsets, up
    to the end of the first run of consecutive numbers: an offset listed twice ends that run,
    so each commit then moves the offset by one (an acknowledgement landing during a rebalance,
    after faust cleared its index of the partition, lists an offset twice once it is read and
    acknowledged again: 30 records took 90 s to commit). Wrap `_new_offset` so that the list
    holds each offset once. Once per consumer."""
    if getattr(consumer, "_tracejudge_unique_acks", False):
        return
    original = consumer._new_offset

    def new_offset(tp: Any) -> Any:
        with ack_lock:  # what `Consumer.ack` holds while it adds to these
            acked = consumer._acked[tp]
            if len(acked) > 1:
                unique = sorted(set(acked))
                if len(unique) != len(acked):
                    acked[:] = unique
                    consumer._acked_index[tp].update(unique)
            return original(tp)

    consumer._new_offset = new_offset
    consumer._tracejudge_unique_acks = True


def set_fetch_max_wait(consumer: Any, wait_ms: int, prefetch_backoff_s: float) -> None:
    """faust-streaming creates its consumer with fetch_max_wait_ms=1500, and aiokafka does not
    fetch a partition whose records are still buffered: one long poll on the other partitions
    then holds that partition's new records back up to 1.5 s. The other way round, while any
    partition of a broker has records nobody has taken, aiokafka sends that broker no fetch for
    the others for up to its `prefetch_backoff` (100 ms): the ~100 ms tail of one request in a
    hundred (BENCHMARKS.md). Call once the consumer started."""
    fetcher = consumer._thread._consumer._fetcher
    fetcher._fetch_max_wait_ms = wait_ms
    fetcher._prefetch_backoff = prefetch_backoff_s


def aiokafka_producer(producer: Any) -> Any:
    """The AIOKafkaProducer inside Faust's producer (None until it started)."""
    return getattr(producer, "_producer", None)


def send_lingering(producer: Any) -> bool:
    """Close the batches `producer` (an AIOKafkaProducer) holds for their linger and wake its
    sender, so they go in its next produce request: aiokafka has no public call for this (its
    `flush_for_commit`, for transactions, does it and then waits). Returns False, and changes
    nothing, when the producer has not started."""
    accumulator = getattr(producer, "_message_accumulator", None)
    batches = getattr(accumulator, "_batches", None)
    waiter = getattr(accumulator, "_waiter_future", None)
    if batches is None or waiter is None:
        return False
    for queued in batches.values():
        for batch in queued:
            # a closed builder takes no more records (new ones start a batch of their own)
            # and ends the batch's linger (`MessageBatch.remaining_linger`)
            batch._builder.close()
    if not waiter.done():
        waiter.set_result(None)
    return True


def replace_wait_first(consumer: Any, make: Callable[[Any, Callable[[], bool]], Any]) -> None:
    """Replace the consumer's `wait_first` (mode's, which its fetcher awaits for each record
    handed to a stream) with `make(original, stopped)`, once; `stopped` says whether the
    service stopped or crashed."""
    if getattr(consumer, "_tracejudge_wait_first", False):
        return
    consumer.wait_first = make(
        consumer.wait_first,
        lambda: consumer._stopped.is_set() or consumer._crashed.is_set(),
    )
    consumer._tracejudge_wait_first = True


class DeadlineWorker(faust.Worker):  # type: ignore[misc]
    """Faust's worker, with a deadline on the graceful stop (it overrides mode's
    `_schedule_shutdown`).

    With the broker gone, a graceful stop can wait on commits and flushes for a long time; a
    supervisor then kills the worker anyway. Exiting at the deadline is as safe: what was not
    committed is delivered again.
    """

    def __init__(self, *args: Any, stop_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop_timeout_s = stop_timeout_s
        self._deadline: threading.Timer | None = None

    def _schedule_shutdown(self, signum: signal.Signals) -> None:
        if self._deadline is None:
            self._deadline = threading.Timer(self.stop_timeout_s, self._stop_now, (signum,))
            self._deadline.daemon = True
            self._deadline.start()
        super()._schedule_shutdown(signum)

    def _stop_now(self, signum: signal.Signals) -> None:
        log.warning(
            "%s: graceful stop not done after %.0fs; exiting now", signum.name, self.stop_timeout_s
        )
        logging.shutdown()
        os._exit(0)
