"""How long the worker's produced records wait for company: briefly while it keeps up, longer
while it works through a backlog.

A produce request costs the worker a socket write (on loopback, the kernel's delivery to the
broker too) and the broker a request, whatever it carries. While the worker keeps up, the
producer's linger (`TRACEJUDGE_PRODUCER_LINGER_MS`) bounds how long a verdict waits for others
to travel with. Behind a backlog, every input record already waits for the records read before
it: a longer linger then adds little to any verdict's delay, and packs the verdicts and
changelog records of many requests into each produce request. Kafka's clients leave this to
the configured linger; the worker knows when it is behind (its consumer's lag, which each fetch
response reports), so it chooses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Records still in the log behind the one being handled, in its partition, from which the worker
# counts as behind. A worker handles a few thousand events a second per core, so 500 waiting
# records are 100 ms or more of work: five times the default backlog linger at the least.
BEHIND_RECORDS = 500
# The lag is read once every this many records: a look-up through Faust's consumer thread
# object costs a few microseconds, a counter next to nothing.
CHECK_EVERY = 64


@dataclass
class BacklogLinger:
    live_s: float  # the configured linger
    backlog_s: float  # the linger while behind; at or below `live_s`: never switched to
    # the partition's highwater (the offset its next record will get), None while unknown
    highwater: Callable[[int], int | None]
    # sets the producer's linger for the batches it starts from now on; False: not started
    apply: Callable[[float], bool]
    # sends what the producer holds now: caught up, the backlog's batches need not wait longer
    send_held: Callable[[], object] = lambda: None
    behind: bool = False
    switches: int = 0  # to a backlog and back, each counted
    _seen: int = 0

    @property
    def enabled(self) -> bool:
        return self.backlog_s > self.live_s

    def current_s(self) -> float:
        return self.backlog_s if self.behind else self.live_s

    def seen(self, partition: int, offset: int) -> None:
        """An input record at `offset` of `partition` is being handled."""
        self._seen += 1
        if self._seen < CHECK_EVERY or not self.enabled:
            return
        self._seen = 0
        end = self.highwater(partition)
        behind = end is not None and end - offset - 1 >= BEHIND_RECORDS
        if behind != self.behind:
            self._switch(behind)

    def reset(self) -> None:
        """Partitions revoked: what comes next is judged afresh, at the configured linger."""
        if self.behind:
            self._switch(False)
        self._seen = 0

    def _switch(self, behind: bool) -> None:
        if self.apply(self.backlog_s if behind else self.live_s):
            self.behind = behind
            self.switches += 1
            if not behind:
                self.send_held()
