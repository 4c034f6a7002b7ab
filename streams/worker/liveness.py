"""Since when each owned input partition has been consumed live.

A window closes by idle timeout when its *agent* went quiet, not when the pipeline did: during
a broker outage, a rebalance or a backlog, events may be waiting that the worker has not read.
So a window's idle time counts only from the later of its last event and the moment its
partition became live again: owned, the broker answering, and caught up. Caught up means every
record that was in the log at the previous observation has been processed: under steady traffic
there is always a record in flight, so "nothing left to read" would never hold, while a real
backlog fails this test at every observation. The stall watchdog observes this every few
seconds, with the offsets it reads anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass
class PartitionLiveness:
    clock: Callable[[], float]  # the windows' clock (epoch seconds)
    live_since: dict[int, float] = field(default_factory=dict)
    processed_next: dict[int, int] = field(default_factory=dict)
    previous_ends: dict[int, int] = field(default_factory=dict)
    assignments: int = 0  # revocations seen: the tables may have been restored since

    def processed(self, partition: int, offset: int) -> None:
        """A record of the events topic was handled."""
        if offset + 1 > self.processed_next.get(partition, -1):
            self.processed_next[partition] = offset + 1

    def observe(self, ends: Mapping[int, int], committed: Mapping[int, int]) -> None:
        """Owned partitions with their log end and the group's committed offset; a partition
        not in `ends` is not owned (any more)."""
        now = self.clock()
        for partition in list(self.live_since):
            if partition not in ends:
                del self.live_since[partition]
        for partition, end in ends.items():
            done = max(committed.get(partition, 0), self.processed_next.get(partition, 0))
            if done >= self.previous_ends.get(partition, end):
                self.live_since.setdefault(partition, now)
            else:
                self.live_since.pop(partition, None)  # a backlog: not live until read
        self.previous_ends = dict(ends)

    def lost(self) -> None:
        """The broker stopped answering, or partitions are being reassigned."""
        self.live_since.clear()
        self.previous_ends.clear()  # what was produced meanwhile must be read first

    def revoked(self) -> None:
        self.lost()
        self.processed_next.clear()
        self.assignments += 1

    def since(self, partition: int) -> float | None:
        return self.live_since.get(partition)
