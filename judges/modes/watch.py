"""Which failure modes to announce, from the verdicts as they come: pure, clocked by the
verdicts' own times, so a replay announces what the live stream did.

Per agent and mode, runs are counted in minute buckets over the last `history_s`. A mode is
announced when it reaches `min_runs` runs within `window_s`:
- **new**: it had no run in the history before that window (the first time, or back after the
  history forgot it);
- **jump**: its runs in the window are at least `jump` times what a window of its history
  held on average (and `min_runs` or more);
once per window (a mode that keeps failing is announced again only a window later), with up to
`EXAMPLES` request ids and the agent versions it was seen in. An announced mode with no run for
a whole window is announced **quiet**, once.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Literal

EXAMPLES = 5
Kind = Literal["new", "jump", "quiet"]


@dataclass(frozen=True)
class Announcement:
    kind: Kind
    agent: str | None
    key: str
    name: str
    at: float
    runs: int  # in the window
    before: float  # a window's runs on average in the history before it
    examples: tuple[str, ...]
    versions: tuple[str, ...]
    first_seen: float


@dataclass
class _Mode:
    name: str
    first_seen: float
    buckets: dict[int, int] = field(default_factory=dict)  # minute -> runs
    examples: deque[str] = field(default_factory=lambda: deque(maxlen=EXAMPLES))
    versions: Counter[str] = field(default_factory=Counter)
    announced_at: float | None = None  # the last new/jump announcement
    loud: bool = False  # announced, and not quiet since


@dataclass
class ModeWatch:
    window_s: float = 600.0
    history_s: float = 3600.0
    min_runs: int = 5
    jump: float = 3.0
    modes: dict[tuple[str | None, str], _Mode] = field(default_factory=dict)

    def observe(
        self,
        agent: str | None,
        key: str,
        name: str,
        at: float,
        request_id: str,
        version: str | None = None,
    ) -> Announcement | None:
        mode = self.modes.get((agent, key))
        if mode is None:
            mode = self.modes[(agent, key)] = _Mode(name, at)
        minute = int(at // 60)
        mode.buckets[minute] = mode.buckets.get(minute, 0) + 1
        mode.examples.append(request_id)
        mode.versions[version or ""] += 1
        self._forget(mode, at)
        runs, before = self._rates(mode, at)
        if runs < self.min_runs:
            return None
        if mode.announced_at is not None and at - mode.announced_at < self.window_s:
            return None  # once per window
        if before == 0:
            kind: Kind = "new"
        elif runs >= self.jump * before:
            kind = "jump"
        else:
            return None
        mode.announced_at, mode.loud = at, True
        return self._said(kind, agent, key, mode, at, runs, before)

    def tick(self, now: float) -> list[Announcement]:
        """Modes announced that had no run for a whole window: quiet (once)."""
        quiet = []
        for (agent, key), mode in list(self.modes.items()):
            self._forget(mode, now)
            runs, before = self._rates(mode, now)
            if mode.loud and runs == 0:
                mode.loud = False
                quiet.append(self._said("quiet", agent, key, mode, now, 0, before))
            if not mode.buckets:
                del self.modes[(agent, key)]
        return quiet

    def _rates(self, mode: _Mode, at: float) -> tuple[int, float]:
        """(runs in the window ending at `at`, a window's runs on average before it)."""
        start = int((at - self.window_s) // 60)
        runs = sum(n for m, n in mode.buckets.items() if m > start)
        earlier = sum(n for m, n in mode.buckets.items() if m <= start)
        # the windows of its past it was watched in (a mode seen ten minutes ago has one)
        watched = min(self.history_s - self.window_s, at - self.window_s - mode.first_seen)
        return runs, earlier / max(1.0, watched / self.window_s)

    def _forget(self, mode: _Mode, at: float) -> None:
        oldest = int((at - self.history_s) // 60)
        for minute in [m for m in mode.buckets if m <= oldest]:
            del mode.buckets[minute]

    def _said(
        self,
        kind: Kind,
        agent: str | None,
        key: str,
        mode: _Mode,
        at: float,
        runs: int,
        before: float,
    ) -> Announcement:
        versions = tuple(v for v, _ in mode.versions.most_common(5) if v)
        return Announcement(
            kind, agent, key, mode.name, at, runs, before, tuple(mode.examples), versions,
            mode.first_seen,
        )  # fmt: skip
