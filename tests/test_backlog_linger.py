"""The producer lingers longer only while the worker is behind its input, and comes back (sending
what waited) once it caught up."""

from __future__ import annotations

from dataclasses import dataclass, field

from tracejudge.streams.worker.linger import BEHIND_RECORDS, CHECK_EVERY, BacklogLinger


@dataclass
class Producer:
    """What the linger acts on: the producer's linger for new batches, and its sends."""

    started: bool = True
    linger_s: float = 0.005
    sends: int = 0
    ends: dict[int, int] = field(default_factory=dict)  # partition -> highwater

    def apply(self, seconds: float) -> bool:
        if self.started:
            self.linger_s = seconds
        return self.started

    def send_held(self) -> None:
        self.sends += 1

    def linger(self, backlog_s: float = 0.025) -> BacklogLinger:
        return BacklogLinger(0.005, backlog_s, self.ends.get, self.apply, send_held=self.send_held)


def handle(linger: BacklogLinger, partition: int, offsets: range) -> None:
    for offset in offsets:
        linger.seen(partition, offset)


def test_a_backlog_lingers_longer_and_catching_up_sends_what_waited() -> None:
    producer = Producer(ends={0: 10_000})
    linger = producer.linger()
    handle(linger, 0, range(0, CHECK_EVERY))
    assert linger.behind and producer.linger_s == 0.025
    assert linger.current_s() == 0.025
    # within BEHIND_RECORDS of the end: caught up
    handle(linger, 0, range(10_000 - BEHIND_RECORDS + 1, 10_000 - BEHIND_RECORDS + 1 + CHECK_EVERY))
    assert not linger.behind and producer.linger_s == 0.005
    assert producer.sends == 1
    assert linger.switches == 2


def test_keeping_up_never_changes_the_linger() -> None:
    producer = Producer(ends={0: 5_000})
    linger = producer.linger()
    handle(linger, 0, range(5_000 - BEHIND_RECORDS // 2, 5_000))
    assert not linger.behind and producer.linger_s == 0.005 and linger.switches == 0


def test_the_lag_is_read_once_every_few_records() -> None:
    producer = Producer(ends={0: 10_000})
    linger = producer.linger()
    handle(linger, 0, range(CHECK_EVERY - 1))
    assert not linger.behind
    linger.seen(0, CHECK_EVERY)
    assert linger.behind


def test_an_unknown_highwater_is_not_a_backlog() -> None:
    producer = Producer()  # no fetch response yet
    linger = producer.linger()
    handle(linger, 3, range(4 * CHECK_EVERY))
    assert not linger.behind and linger.switches == 0


def test_a_backlog_linger_not_above_the_configured_one_is_never_used() -> None:
    producer = Producer(ends={0: 10_000})
    linger = producer.linger(backlog_s=0.005)
    handle(linger, 0, range(4 * CHECK_EVERY))
    assert not linger.behind and linger.switches == 0


def test_a_producer_not_started_keeps_the_state_and_is_tried_again() -> None:
    producer = Producer(started=False, ends={0: 10_000})
    linger = producer.linger()
    handle(linger, 0, range(CHECK_EVERY))
    assert not linger.behind
    producer.started = True
    handle(linger, 0, range(CHECK_EVERY, 2 * CHECK_EVERY))
    assert linger.behind and producer.linger_s == 0.025


def test_revoked_partitions_bring_the_configured_linger_back() -> None:
    producer = Producer(ends={0: 10_000})
    linger = producer.linger()
    handle(linger, 0, range(CHECK_EVERY))
    assert linger.behind
    linger.reset()
    assert not linger.behind and producer.linger_s == 0.005 and producer.sends == 1
    linger.reset()  # nothing to undo
    assert producer.sends == 1
