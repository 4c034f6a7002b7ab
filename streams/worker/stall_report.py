"""What the consumer was doing when consumption stalled: one line per owned input partition.

The stall watchdog exits a worker that makes no progress (the events come again after the
restart); this report, logged when the stall is first seen and again at the exit, says why: a
partition paused by Faust or by aiokafka, one without a fetch position (waiting for an offset
reset), records fetched and not handed over, a flow never resumed after a rebalance, the offset
guard waiting for a hole, acknowledged records Faust cannot commit (`acked_from` above
`faust_committed`: a hole at the head of its list), or a table recovery that never ends (the
changelog partitions it still reads, and where each task waits: code locations only, no
values).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tracejudge.streams.kafka.internals import consumer_flow, consumer_view
from tracejudge.streams.shared.commit import OffsetGuard


def _fields(values: dict[str, object]) -> str:
    return " ".join(f"{name}={value}" for name, value in values.items())


def partition_line(faust_consumer: Any, guard: OffsetGuard, tp: Any) -> str:
    """`topic[p]` and what each layer knows of it."""
    key = (tp.topic, tp.partition)
    values = consumer_view(faust_consumer, tp)
    values["next_to_handle"] = guard.expected.get(key)
    seek = guard.pending.get(key)
    if seek is not None:
        values["seek_pending_to"] = f"{seek.target}x{seek.attempts}"
    return f"{tp.topic}[{tp.partition}]: {_fields(values)}"


def recovery_lines(faust_consumer: Any, guard: OffsetGuard, recovery: Any) -> list[str]:
    """Faust's table recovery, if one runs: each changelog partition it still has to read."""
    if recovery is None or not getattr(recovery, "in_recovery", False):
        return ["recovery: not running"]
    try:
        remaining = dict(recovery.active_stats())
    except Exception as exc:  # its state changed meanwhile
        return [f"recovery: running, its state unreadable: {exc!r}"]
    lines = [f"recovery: running, {len(remaining)} changelog partition(s) to read"]
    for tp, stats in sorted(remaining.items(), key=lambda item: (item[0].topic, item[0].partition)):
        line = partition_line(faust_consumer, guard, tp)
        lines.append(f"{line} recovery_at={stats.offset} recovery_needs={stats.highwater}")
    return lines


def stall_report(
    faust_consumer: Any, guard: OffsetGuard, owned: Iterable[Any], recovery: Any = None
) -> str:
    """The consumer's flow, one line per owned input partition, then the table recovery."""
    lines = ["consumer " + _fields(consumer_flow(faust_consumer))]
    lines += [
        partition_line(faust_consumer, guard, tp)
        for tp in sorted(owned, key=lambda tp: (tp.topic, tp.partition))
    ]
    lines += recovery_lines(faust_consumer, guard, recovery)
    return "\n  ".join(lines)
