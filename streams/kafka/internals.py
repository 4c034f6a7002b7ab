"""Every use of faust-streaming's, mode's and aiokafka's private state, in one place.

The worker relies on a few pieces of these libraries' internals, each for a reason given where it
is used. They are not part of any public API, so a new release may move them: `check()` runs at
start-up and fails with one clear message naming what is missing and the versions installed,
instead of a worker that starts and then loses offsets or stalls. The versions tested are the
ranges pinned in pyproject.toml. The stall report (`consumer_view`) reads more of their state,
for a log line only: what is missing there is left out, never relied on. Nothing else in the
project touches a private attribute of these libraries (tests/test_internals.py keeps it so),
but `membership.py`: aiokafka's alone, for the judge stage, which never imports faust.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
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
        "commit every acknowledged offset at once, never one per commit (checked_new_offset)",
    ),
    Reliance(
        "faust.transport.consumer:Consumer",
        "_acked",
        "commit every acknowledged offset at once, never one per commit (checked_new_offset)",
    ),
    Reliance(
        "faust.transport.consumer:Consumer",
        "_acked_index",
        "commit every acknowledged offset at once, never one per commit (checked_new_offset)",
    ),
    Reliance(
        "faust.transport.consumer:Consumer",
        "_unacked_messages",
        "never commit past a record still being handled (checked_new_offset)",
    ),
    Reliance(
        "faust.transport.consumer:Consumer",
        "_committed_offset",
        "keep the offsets faust counts as committed from going back (commits_never_back)",
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
        "aiokafka.consumer.consumer:AIOKafkaConsumer",
        "_coordinator",
        "keep the group membership when a commit sent before a rebalance is refused after it",
    ),
    Reliance(
        "aiokafka.consumer.group_coordinator:GroupCoordinator",
        "_do_commit_offsets",
        "keep the group membership when a commit sent before a rebalance is refused after it",
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
        "aiokafka.producer.message_accumulator:MessageAccumulator",
        "_linger_time",
        "linger longer while the worker works through a backlog (worker/linger.py)",
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


def checked_new_offset(consumer: Any) -> None:
    """faust-streaming computes the offset to commit from its list of acknowledged offsets, up
    to the end of the first run of consecutive numbers. Two flaws, fixed by wrapping
    `_new_offset` (once per consumer):

    - an offset listed twice ends that run, so each commit then moves the offset by one (an
      acknowledgement landing during a rebalance, after faust cleared its index of the
      partition, lists an offset twice once it is read and acknowledged again: 30 records took
      90 s to commit). The list is made to hold each offset once.
    - the run may start one above the committed offset (faust tolerates a gap of one at the
      head, for a transaction marker, which is no record): when that offset is a record still
      being handled (its step held, its verdict not acknowledged yet), the commit passes over
      it, and a crash then loses it. A record delivered and not acknowledged below the run
      holds the commit back instead.
    """
    if getattr(consumer, "_tracejudge_checked_new_offset", False):
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
            if acked and _unacked_at_head(consumer, tp, acked):
                return None
            return original(tp)

    consumer._new_offset = new_offset
    consumer._tracejudge_checked_new_offset = True


def _unacked_at_head(consumer: Any, tp: Any, acked: list[int]) -> bool:
    """Whether faust would commit over an offset at the head of `tp` (the one just above the
    committed offset, or any below the first acknowledged one when nothing is committed yet)
    that holds a record delivered and not acknowledged. Only then are the messages in flight
    looked through: not on every commit."""
    committed = consumer._committed_offset[tp]
    gaps = consumer._gap.get(tp)
    head = min([min(acked), *(interval.begin for interval in gaps or ())])
    if committed and head != committed + 1:
        return False  # the head is acknowledged, or faust itself waits for it (it does not
        # look at the head when the committed offset is None or 0)
    low = -1 if committed is None else committed
    return any(
        message.tp == tp and not message.acked and low <= message.offset < head
        for message in list(consumer._unacked_messages)
    )


class _ForwardOffsets(defaultdict[Any, Any]):
    """Per partition, an offset that only moves forward: a lower one (or None) set over a known
    one is ignored. Removing a partition (faust does on revocation) forgets it."""

    def __init__(self, offsets: Mapping[Any, Any]) -> None:
        super().__init__(lambda: None)
        dict.update(self, offsets)

    def __setitem__(self, tp: Any, offset: Any) -> None:
        current = self.get(tp)
        if current is not None and (offset is None or offset < current):
            return
        super().__setitem__(tp, offset)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for tp, offset in dict(*args, **kwargs).items():
            self[tp] = offset


def commits_never_back(consumer: Any) -> None:
    """After each rebalance's recovery, faust-streaming's `perform_seek` reads the group's
    committed offsets one partition after the other (0.4 s for 37 partitions) and then records
    them as its own. It resumes the flow before that, so records are processed and committed
    meanwhile, and the stale offsets it records put a partition's commit back below offsets it
    has already taken off its acknowledged list: `_new_offset` then sees a hole at the head of
    that list for good, and the partition is never committed again (the worker stalled when
    scaled from 3 workers to 1 under load). Make the offsets it records only move forward,
    within an assignment (revocation removes them). Once per consumer."""
    if isinstance(consumer._committed_offset, _ForwardOffsets):
        return
    consumer._committed_offset = _ForwardOffsets(consumer._committed_offset)


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


def set_linger(producer: Any, seconds: float) -> bool:
    """Set the linger of the batches `producer` (an AIOKafkaProducer) starts from now on
    (aiokafka takes it once, at construction; each batch keeps the linger it started with).
    Returns False, and changes nothing, when the producer has not started."""
    accumulator = getattr(producer, "_message_accumulator", None)
    if accumulator is None:
        return False
    accumulator._linger_time = seconds
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
        # Faust's terminal spinner: at a log level of WARNING or above it sets the root logger
        # to DEBUG so that every record spins it, and every debug call of every library then
        # builds a record on the event path (Faust logs each message it sends): a few percent
        # of the worker's CPU per event, for a spinner nobody sees in a service.
        self.spinner = None
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


def _path(obj: Any, *names: str) -> Any:
    for name in names:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def consumer_view(consumer: Any, tp: Any) -> dict[str, object]:
    """What aiokafka and faust know of one partition of `consumer` (faust's), for the stall
    report: read without awaiting (the broker may be what is gone), each field left out when
    this version of the library has no such state."""
    view: dict[str, object] = {}
    aio = _path(consumer, "_thread", "_consumer")
    assignment = _path(aio, "_subscription", "subscription", "assignment")
    try:
        state = assignment.state_value(tp) if assignment is not None else None
    except Exception:  # revoked meanwhile
        state = None
    if state is not None:
        view["position"] = state._position if state.has_valid_position else None
        view["highwater"] = state.highwater
        view["aiokafka_paused"] = state.paused
        view["awaiting_reset"] = state.awaiting_reset
    buffered = _path(aio, "_fetcher", "_records")
    if isinstance(buffered, dict):
        view["fetched_not_taken"] = tp in buffered
    for name, field in (
        ("faust_active", "_active_partitions"),
        ("faust_paused", "_paused_partitions"),
        ("faust_buffer_full", "_buffered_partitions"),
    ):
        tps = getattr(consumer, field, None)
        if tps is not None:
            view[name] = tp in tps
    for name, field in (("faust_read", "_read_offset"), ("faust_committed", "_committed_offset")):
        offsets = getattr(consumer, field, None)
        if isinstance(offsets, Mapping):
            view[name] = offsets.get(tp)
    acked = getattr(consumer, "_acked", None)
    if isinstance(acked, Mapping):
        waiting = acked.get(tp) or []
        view["acked_waiting"] = len(waiting)
        view["acked_from"] = min(waiting) if waiting else None
    return view


def consumer_flow(consumer: Any) -> dict[str, object]:
    """faust's flow switch and how many fetched messages are not acknowledged yet."""
    unacked = getattr(consumer, "_unacked_messages", None)
    return {
        "flow_active": getattr(consumer, "flow_active", None),
        "unacked_messages": None if unacked is None else len(unacked),
    }
