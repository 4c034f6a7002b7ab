"""The offset guard: no record skipped by the consumer goes unhandled."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from tests.realservices import free_port
from tracejudge.settings import Settings
from tracejudge.streams.shared.commit import SEEK_RETRY_S, STUCK_S, OffsetGuard
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.worker import watchdog
from tracejudge.streams.worker.watchdog import StallWatchdog

TP = ("events", 0)


class Consumer:
    """Plays the consumer: committed offsets, and the seeks asked of it."""

    def __init__(self, committed: int | None, first: int | None = None) -> None:
        self.committed_offset = committed
        self.first = first
        self.seeks: list[int] = []
        self.now = 0.0
        self.pos: int | None = None  # the next offset the consumer fetches

    async def position(self, tp: tuple[str, int]) -> int | None:
        return self.pos

    async def committed(self, tp: tuple[str, int]) -> int | None:
        return self.committed_offset

    async def seek(self, tp: tuple[str, int], offset: int) -> None:
        self.seeks.append(offset)

    async def first_offset(self, tp: tuple[str, int], offset: int) -> int | None:
        return offset if self.first is None else max(offset, self.first)


def guard(consumer: Consumer) -> OffsetGuard:
    return OffsetGuard(
        consumer.committed,
        consumer.seek,
        consumer.first_offset,
        Metrics(),
        position=consumer.position,
        clock=lambda: consumer.now,
    )


async def test_in_order_records_are_handled_from_the_committed_offset() -> None:
    c = Consumer(committed=10)
    g = guard(c)
    assert [await g.admit(TP, o) for o in (10, 11, 12)] == [True, True, True]
    assert g.processed() == {TP: 13} and c.seeks == []


async def test_a_first_record_beyond_the_committed_offset_seeks_back_and_waits() -> None:
    c = Consumer(committed=10)
    g = guard(c)
    assert not await g.admit(TP, 15)  # Faust resumed before seeking: 10..14 were skipped
    assert c.seeks == [10] and g.metrics.counts["offset_skips_repaired"] == 1
    assert not await g.admit(TP, 16)  # buffered before the seek: passed over, no second seek
    assert c.seeks == [10]
    handled = [o for o in (10, 11, 12, 13, 14, 15, 16) if await g.admit(TP, o)]
    assert handled == [10, 11, 12, 13, 14, 15, 16] and g.processed() == {TP: 17}


async def test_a_hole_in_the_middle_is_read_again_and_re_reads_are_handled() -> None:
    c = Consumer(committed=0)
    g = guard(c)
    assert await g.admit(TP, 0) and await g.admit(TP, 1)
    assert not await g.admit(TP, 4)
    assert c.seeks == [2]
    assert await g.admit(TP, 1)  # at or below: a re-read, handled (duplicates are dropped)
    assert await g.admit(TP, 2) and await g.admit(TP, 3) and await g.admit(TP, 4)


async def test_a_seek_undone_by_buffered_records_is_repeated_until_the_hole_comes() -> None:
    c = Consumer(committed=5)
    g = guard(c)
    assert not await g.admit(TP, 9)
    await g.retry()
    assert c.seeks == [5]  # too early to repeat
    c.now += SEEK_RETRY_S
    await g.retry()  # the record at 5 exists: seek again
    assert c.seeks == [5, 5] and g.metrics.counts["offset_seeks_repeated"] == 1
    assert await g.admit(TP, 5) and not g.pending


async def test_offsets_that_hold_no_record_are_passed_over() -> None:
    c = Consumer(committed=5, first=7)  # 5 and 6: transaction markers, never delivered
    g = guard(c)
    assert not await g.admit(TP, 7)
    c.now += SEEK_RETRY_S
    await g.retry()
    assert c.seeks == [5, 7] and g.metrics.counts["offset_gaps_without_records"] == 1
    assert await g.admit(TP, 7) and g.processed() == {TP: 8}


async def test_no_commit_yet_starts_at_the_first_record_and_reset_reads_commits_again() -> None:
    c = Consumer(committed=None)
    g = guard(c)
    assert await g.admit(TP, 42)
    g.reset()
    c.committed_offset = 40
    assert not await g.admit(TP, 43)
    assert c.seeks == [40]


async def test_a_hole_at_the_end_of_a_partition_with_no_record_since_assignment() -> None:
    # traffic stopped as a rebalance began: the records handled but not committed before it
    # were passed over on reassignment, and no later record comes to show the hole
    c = Consumer(committed=20)
    c.pos = 31
    g = guard(c)
    g.assigned([TP])
    await g.retry()
    c.now += STUCK_S - 1
    await g.retry()
    assert c.seeks == []  # records may still be on their way
    c.now += 1
    await g.retry()
    assert c.seeks == [20] and g.metrics.counts["offset_skips_repaired"] == 1
    assert g.processed() == {TP: 20}  # the watchdog sees nothing handled past the commit
    handled = [o for o in range(20, 31) if await g.admit(TP, o)]
    assert handled == list(range(20, 31)) and not g.pending


async def test_a_hole_at_the_end_after_the_first_records_were_read_again() -> None:
    c = Consumer(committed=20)
    c.pos = 31
    g = guard(c)
    g.assigned([TP])
    assert [await g.admit(TP, o) for o in (20, 21, 22)] == [True, True, True]
    await g.retry()  # the next offset moved: watched from now
    c.now += STUCK_S
    await g.retry()
    assert c.seeks == [23]
    assert all([await g.admit(TP, o) for o in range(23, 31)]) and g.processed() == {TP: 31}


async def test_a_caught_up_or_delivering_partition_is_left_alone() -> None:
    c = Consumer(committed=20)
    c.pos = 20  # at the commit: nothing passed over
    g = guard(c)
    g.assigned([TP])
    for _ in range(3):
        c.now += STUCK_S
        await g.retry()
    assert c.seeks == []
    c.pos = 40  # records keep coming: the next offset moves between looks
    for offset in (20, 25, 30):
        assert all([await g.admit(TP, o) for o in range(offset, offset + 5)])
        c.now += STUCK_S
        await g.retry()
    assert c.seeks == [] and g.processed() == {TP: 35}


async def test_a_broker_that_does_not_answer_is_asked_again_later() -> None:
    c = Consumer(committed=20)
    c.pos = 31
    g = guard(c)
    g.assigned([TP])
    answers = c.committed

    async def away(tp: tuple[str, int]) -> int | None:
        raise RuntimeError("cannot read the committed offset")

    g.committed = away
    c.now += STUCK_S
    await g.retry()  # nothing raised: the timer goes on
    assert c.seeks == []
    g.committed = answers
    c.now += 1
    await g.retry()
    assert c.seeks == []  # not asked again at every tick
    c.now += STUCK_S
    await g.retry()
    assert c.seeks == [20]


async def test_an_unknown_position_is_asked_again_and_a_revocation_forgets_progress() -> None:
    c = Consumer(committed=20)
    g = guard(c)
    g.assigned([TP])
    c.now += STUCK_S
    await g.retry()
    assert c.seeks == []  # position not known
    g.reset()
    c.pos = 30
    c.now += STUCK_S
    await g.retry()
    assert c.seeks == [] and not g.progress


def test_the_watchdog_fires_when_commits_stop_moving_behind_what_was_processed() -> None:
    now = [0.0]
    processed = {TopicPartition("events", 0): 100}
    dog = StallWatchdog(
        Settings(stall_timeout_s=10),
        ["events"],
        owned=set,
        last_progress=lambda: now[0],
        clock=lambda: now[0],
        processed=lambda: processed,
    )
    tp = TopicPartition("events", 0)
    assert dog.commits_stuck({tp: 90}, now[0]) is None  # behind, for now
    for step in range(1, 10):  # a busy worker: commits lag but move
        now[0] = step * 20.0
        processed[tp] = 100 + 50 * step
        assert dog.commits_stuck({tp: 90 + 40 * step}, now[0]) is None
    now[0] += 29
    assert dog.commits_stuck({tp: 450}, now[0]) is None  # unmoved for 29 s < 3 x 10 s
    now[0] += 2
    reason = dog.commits_stuck({tp: 450}, now[0])
    assert reason is not None and "has not moved for 31s" in reason
    assert dog.commits_stuck({tp: 550}, now[0]) is None  # caught up: nothing to watch


async def test_a_broker_gone_before_the_first_probe_is_watched_not_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The broker can die between the worker's start and the watchdog's: starting its probe
    # consumer must count as an outage (503, then the exit), never crash the task.
    monkeypatch.setattr(watchdog, "PROBE_INTERVAL_S", 0.01)
    monkeypatch.setattr(watchdog, "PROBE_TIMEOUT_S", 1.0)
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens here
    now = [0.0]
    dog = StallWatchdog(
        Settings(kafka_bootstrap=nobody, broker_down_exit_s=30),
        ["events"],
        owned=set,
        last_progress=lambda: 0.0,
        clock=lambda: now[0],
    )
    stalls: list[str] = []

    def on_stall(reason: str) -> None:
        stalls.append(reason)
        raise asyncio.CancelledError  # the worker exits here

    async def advance() -> None:
        while True:
            await asyncio.sleep(0.02)
            now[0] += 10.0

    clock = asyncio.create_task(advance())
    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(dog.run(on_stall), timeout=30)
    finally:
        clock.cancel()
    assert dog.probe_failures >= 2
    assert stalls and stalls[0].startswith("broker unreachable for")
