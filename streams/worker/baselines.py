"""Each agent's normal, learned from its closed requests, kept in a changelogged table.

A table, not Redis: the baseline changes as windows close, which happens in-stream on the
window agent, so its writes go to the changelog of the partition being read, with the rest of
the window state; a crash or a rebalance restores it with the partition (no other store to keep
consistent, no round trip per verdict, and it works with Redis off). Each partition learns from
its own requests: `{group}␟{partition}` -> the group's `Baseline` there. A worker judges a run
against the merge of the partitions it owns. Requests are spread over partitions by a hash of
their id, so each partition's runs are an unbiased sample of the agent's: this module relies on
that. The merge is exact (DDSketch), so a worker that owns every partition, and `replay`, see
the same baseline one process learning from every run would.

A group's record is written at most once per `write_every_s` on the close path; what is still
unwritten is written by a marker the timer sends through the partition (tables change only
in-stream). A kill -9 loses at most that much learning, never a verdict.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from tracejudge.judges.rules.agent_norms import Norms, RunStats
from tracejudge.judges.rules.baselines import Baseline

SEP = "\x1f"
BASELINE_MARKER_ID = "tracejudge:baselines"  # the request id of the timer's write marker


def baseline_key(group: str, partition: int) -> str:
    return f"{group}{SEP}{partition}"


@dataclass
class BaselineBook:
    table: MutableMapping[str, Any]
    min_runs: int
    epoch_runs: int
    write_every_s: float = 1.0
    parts: dict[str, Baseline] = field(default_factory=dict)  # key -> as in the table
    merged: dict[str, Baseline] = field(default_factory=dict)  # group -> over owned partitions
    cached: dict[str, Norms] = field(default_factory=dict)
    written_at: dict[str, float] = field(default_factory=dict)  # key -> last written
    dirty: set[str] = field(default_factory=set)  # keys learned from since written

    def norms(self, group: str) -> Norms:
        """The group's normal over the partitions this worker owns, before this run."""
        merged = self._merged(group)
        norms = self.cached.get(group)
        # the quantiles move slowly once there are many runs: recomputed every ~2 % of them
        if norms is None or merged.runs - norms.runs >= max(1, merged.runs // 50):
            norms = merged.norms(group, self.min_runs)
            self.cached[group] = norms
        return norms

    def observe(self, group: str, partition: int, stats: RunStats, now: float) -> None:
        """Learn a closed run (in-stream, from the partition it was read from)."""
        key = baseline_key(group, partition)
        part = self._part(key)
        if part.observe(stats):
            self.merged.pop(group, None)  # an epoch turned: its oldest runs leave the merge
            self.cached.pop(group, None)
        elif group in self.merged:
            self.merged[group].add_run(stats)
        self.dirty.add(key)
        if now - self.written_at.get(key, float("-inf")) >= self.write_every_s:
            self._write(key, now)

    def due(self, now: float) -> set[int]:
        """Partitions with learning not written for `write_every_s`."""
        return {
            int(key.rpartition(SEP)[2])
            for key in self.dirty
            if now - self.written_at.get(key, float("-inf")) >= self.write_every_s
        }

    def write(self, partition: int, now: float) -> int:
        """Write the partition's unwritten baselines (in-stream, from that partition)."""
        keys = [k for k in self.dirty if k.rpartition(SEP)[2] == str(partition)]
        for key in keys:
            self._write(key, now)
        return len(keys)

    def restored(self) -> None:
        """Partitions were restored from their changelogs: merge again what the table holds
        (what was learned here and not yet written is kept)."""
        self.merged.clear()
        self.cached.clear()
        for key in [k for k in self.parts if k not in self.dirty]:
            del self.parts[key]

    def forget(self) -> None:
        """Partitions moved: what is in memory is rebuilt from the table when next needed."""
        self.parts.clear()
        self.merged.clear()
        self.cached.clear()
        self.written_at.clear()
        self.dirty.clear()

    def _write(self, key: str, now: float) -> None:
        self.table[key] = self._part(key).to_json()
        self.dirty.discard(key)
        self.written_at[key] = now

    def _part(self, key: str) -> Baseline:
        part = self.parts.get(key)
        if part is None:
            stored = self.table.get(key)
            part = (
                Baseline(self.epoch_runs)
                if stored is None
                else Baseline.from_json(stored, self.epoch_runs)
            )
            self.parts[key] = part
        return part

    def _merged(self, group: str) -> Baseline:
        merged = self.merged.get(group)
        if merged is None:
            merged = Baseline(self.epoch_runs)
            prefix = group + SEP
            seen = set()
            # items(), not get(): in-stream, Faust's RocksDB store looks a key up in the current
            # event's partition only, and the merge needs every partition this worker owns
            for raw_key, stored in list(self.table.items()):
                key = str(raw_key)
                if not key.startswith(prefix) or stored is None:
                    continue
                part = self.parts.get(key)
                if part is None:
                    part = self.parts[key] = Baseline.from_json(stored, self.epoch_runs)
                merged.absorb(part)
                seen.add(key)
            for key, part in self.parts.items():  # learned here, not written yet
                if key.startswith(prefix) and key not in seen:
                    merged.absorb(part)
            self.merged[group] = merged
        return merged
