"""The stall report: what each layer of the consumer knew of a partition when it stalled."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aiokafka import TopicPartition
from aiokafka.consumer.subscription_state import SubscriptionState
from faust.tables.recovery import RecoveryStats

from tracejudge.streams.shared.commit import OffsetGuard, _Seek
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.worker.debug import async_stacks
from tracejudge.streams.worker.stall_report import stall_report

EVENTS0, EVENTS1 = TopicPartition("events", 0), TopicPartition("events", 1)


async def _never(*_: object) -> None:
    return None


def _guard() -> OffsetGuard:
    guard = OffsetGuard(_never, _never, _never, Metrics())
    guard.expected[("events", 0)] = 683
    return guard


async def test_a_partition_whose_acknowledged_records_cannot_be_committed_is_shown() -> None:
    # aiokafka's own subscription state (it needs a running loop), faust's fields around it
    subscription = SubscriptionState()
    subscription.assign_from_user({EVENTS0, EVENTS1})
    state = subscription.subscription.assignment.state_value(EVENTS0)
    state.seek(683)
    state.highwater = 683
    subscription.subscription.assignment.state_value(EVENTS1).pause()
    consumer = SimpleNamespace(
        _thread=SimpleNamespace(
            _consumer=SimpleNamespace(
                _subscription=subscription, _fetcher=SimpleNamespace(_records={EVENTS1: []})
            )
        ),
        flow_active=True,
        _unacked_messages=set(),
        _active_partitions={EVENTS0},
        _paused_partitions=set(),
        _buffered_partitions=set(),
        _read_offset={EVENTS0: 682},
        _committed_offset={EVENTS0: 449},
        _acked={EVENTS0: [461, 462, 463]},
    )
    lines = stall_report(consumer, _guard(), [EVENTS1, EVENTS0]).split("\n  ")
    assert lines[0] == "consumer flow_active=True unacked_messages=0"
    assert lines[1] == (
        "events[0]: position=683 highwater=683 aiokafka_paused=False awaiting_reset=False "
        "fetched_not_taken=False faust_active=True faust_paused=False faust_buffer_full=False "
        "faust_read=682 faust_committed=449 acked_waiting=3 acked_from=461 next_to_handle=683"
    )
    assert lines[2].startswith("events[1]: position=None highwater=None aiokafka_paused=True")
    assert "fetched_not_taken=True faust_active=False" in lines[2]
    assert lines[2].endswith("acked_waiting=0 acked_from=None next_to_handle=None")


def test_a_library_without_that_state_gives_a_shorter_line_not_an_error() -> None:
    guard = _guard()
    guard.pending[("events", 0)] = _Seek(683, at=0.0, attempts=2)
    report = stall_report(object(), guard, [EVENTS0])
    assert report == (
        "consumer flow_active=None unacked_messages=None\n"
        "  events[0]: next_to_handle=683 seek_pending_to=683x2\n"
        "  recovery: not running"
    )


def test_a_recovery_that_never_ends_shows_what_it_still_has_to_read() -> None:
    meta0 = TopicPartition("window-meta-changelog", 0)
    recovery = SimpleNamespace(
        in_recovery=True,
        active_stats=lambda: {meta0: RecoveryStats(highwater=141, offset=68, remaining=73)},
    )
    consumer = SimpleNamespace(_paused_partitions=set(), _active_partitions={meta0})
    lines = stall_report(consumer, _guard(), [], recovery).split("\n  ")
    assert lines[1] == "recovery: running, 1 changelog partition(s) to read"
    assert lines[2] == (
        "window-meta-changelog[0]: faust_active=True faust_paused=False next_to_handle=None "
        "recovery_at=68 recovery_needs=141"
    )


async def test_where_tasks_wait_is_logged_without_the_values_they_wait_on() -> None:
    async def waits() -> None:
        await asyncio.sleep(3600)

    task = asyncio.ensure_future(waits())
    await asyncio.sleep(0)
    try:
        safe, full = async_stacks(values=False), async_stacks()
    finally:
        task.cancel()
    assert "waits" in safe and "awaiting" not in safe
    assert "awaiting <" in full  # the debug page's view shows what is awaited
