"""Which failure modes to announce, from one agent's verdicts as they come: pure, clocked by the
verdicts' own times, so a replay announces what the live stream did.

An agent's verdicts (every final one, clean or not) and each of its modes' runs are counted in
minute buckets over the last `history_s`. A mode is announced when it has `min_runs` runs within
`window_s`:
- **new**: first seen within that window (the first time, or back after the history forgot
  it);
- **jump**: its share of the agent's verdicts in the window, or in its last quarter, is well
  above its share before (its runs at least `min_runs`, `jump` times what that share predicts,
  and that many unlikely by chance: a Poisson tail below `P_JUMP`; in the last quarter, also
  more than twice the most it had in as many minutes before); a surge of traffic alone moves
  no mode;
once per window (a mode that keeps failing is announced again only a window later), with recent
request ids, the agent versions it was seen in and, for a failing tool, the calls before it.
An announced mode with no run for a whole window is announced **quiet**, once. Nothing is
announced while an agent is first watched (`learn_s`): what it fails of then is its normal.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from pydantic import BaseModel, Field

from tracejudge.models.modes import AlertKind, FailureMode, ModeAlert, ModeRun

RECENT = 12  # runs of a mode kept (examples, versions and calls before it in the window)
EXAMPLES = 5
VERSIONS = 16  # an agent's versions remembered (the oldest forgotten first)
P_JUMP = 1e-5  # runs cluster (a task retried, a user asking again): far stricter than 1e-3
# a jump is also looked for in the last quarter of the window, where five runs of a mode
# that had a few an hour are a burst: seen at once, not when the window has filled
SHORT = 4
P_BURST = 5e-3
BURST_OVER_PEAK = 2


@dataclass(frozen=True)
class ModeTimes:
    window_s: float = 600.0
    history_s: float = 3600.0
    min_runs: int = 5
    jump: float = 3.0
    learn_s: float = 600.0
    max_modes: int = 200  # per agent: the one whose last run is oldest goes first


class _Recent(BaseModel):
    at: float
    request_id: str
    version: str | None = None
    after: str | None = None


class ModeCounts(BaseModel):
    """One mode of an agent: its runs per minute, recent runs, versions, announced or not."""

    mode: FailureMode
    first_seen: float
    last_seen: float
    buckets: dict[int, int] = Field(default_factory=dict)  # minute -> runs
    recent: list[_Recent] = Field(default_factory=list)
    versions: dict[str, float] = Field(default_factory=dict)  # version -> first run of it
    announced_at: float | None = None  # the last new or jump announcement
    loud: bool = False  # announced, and not quiet since


class AgentModes(BaseModel):
    """One agent's modes. Stored as records of their own (streams/modes/store.py): the agent's
    counts, and each mode apart, so a run writes its own mode, not every mode of its agent;
    `changed` and `gone` say which modes to write and delete since the last save."""

    agent_name: str | None = None
    since: float
    total: dict[int, int] = Field(default_factory=dict)  # minute -> final verdicts
    versions: dict[str, float] = Field(default_factory=dict)  # version -> first verdict of it
    # version -> minute -> its final verdicts: a mode's share within one version (a canary)
    by_version: dict[str, dict[int, int]] = Field(default_factory=dict)
    modes: dict[str, ModeCounts] = Field(default_factory=dict)
    swept: int = 0  # the minute the buckets were last cut to the history
    changed: set[str] = Field(default_factory=set, exclude=True)
    gone: set[str] = Field(default_factory=set, exclude=True)

    def observe(self, run: ModeRun, times: ModeTimes) -> ModeAlert | None:
        """Count a final verdict (its mode, if any); the announcement it makes, if any."""
        at, minute = run.at, int(run.at // 60)
        self.total[minute] = self.total.get(minute, 0) + 1
        version = run.agent_version
        if version is not None and version not in self.versions:
            self.versions[version] = at
            while len(self.versions) > VERSIONS:
                oldest = min(self.versions, key=self.versions.__getitem__)
                del self.versions[oldest]
                self.by_version.pop(oldest, None)
        if version is not None:
            counts = self.by_version.setdefault(version, {})
            counts[minute] = counts.get(minute, 0) + 1
        self._forget(at, times)
        if run.mode is None:
            return None
        mode = self.modes.get(run.mode.key)
        if mode is None:
            mode = self.modes[run.mode.key] = ModeCounts(mode=run.mode, first_seen=at, last_seen=at)
            self._bound(times)
        mode.mode, mode.last_seen = run.mode, max(mode.last_seen, at)
        mode.buckets[minute] = mode.buckets.get(minute, 0) + 1
        seen = _Recent(at=at, request_id=run.request_id, version=version, after=run.mode.after)
        mode.recent = [*mode.recent[-(RECENT - 1) :], seen]
        if version is not None and version not in mode.versions and len(mode.versions) < VERSIONS:
            mode.versions[version] = at
        self.changed.add(run.mode.key)
        return self._judged(mode, at, times, version)

    def tick(self, now: float, times: ModeTimes) -> list[ModeAlert]:
        """Modes announced that had no run for a whole window: quiet (once); the forgotten go."""
        self._forget(now, times)
        quiet = []
        for key, mode in list(self.modes.items()):
            if mode.loud and now - mode.last_seen >= times.window_s:
                mode.loud = False
                self.changed.add(key)
                runs, before = self._rates(mode, now, times)
                quiet.append(self._said("quiet", mode, now, runs, before, times))
            if not mode.buckets:
                del self.modes[key]
                self.gone.add(key)
        return quiet

    def last_at(self) -> float:
        """When its last verdict was counted (to the minute; `since` before any)."""
        return max(self.total, default=int(self.since // 60)) * 60.0 + 60.0

    def window_runs(self, at: float, times: ModeTimes) -> dict[str, int]:
        """Each mode's runs in the window ending at `at`, by name."""
        runs: dict[str, int] = {}
        for mode in self.modes.values():
            n, _ = self._rates(mode, at, times)
            if n:
                runs[mode.mode.name] = runs.get(mode.mode.name, 0) + n
        return runs

    def _judged(
        self, mode: ModeCounts, at: float, times: ModeTimes, version: str | None = None
    ) -> ModeAlert | None:
        if at - self.since < times.learn_s:
            return None  # first watched: what it fails of is its normal
        if mode.announced_at is not None and at - mode.announced_at < times.window_s:
            return None  # once per window
        runs, before = self._rates(mode, at, times)
        if runs < times.min_runs:
            return None
        if mode.first_seen > at - times.window_s and mode.first_seen >= self.since + times.learn_s:
            # first seen within this window (or back after the history forgot it): a mode
            # seen before it, or while the agent was first watched, is not new
            kind: AlertKind = "new"
        elif self._windows_before(at, times) < 1:
            return None  # no whole window of its past yet to compare with
        elif self._jumped(mode, at, times, times.window_s, P_JUMP) or self._jumped(
            mode, at, times, times.window_s / SHORT, P_BURST
        ):
            kind = "jump"
        elif version is not None and self._jumped_in(mode, at, times, version):
            mode.announced_at, mode.loud = at, True
            return self._said("jump", mode, at, runs, before, times, version)
        else:
            return None
        mode.announced_at, mode.loud = at, True
        return self._said(kind, mode, at, runs, before, times)

    def _jumped_in(self, mode: ModeCounts, at: float, times: ModeTimes, version: str) -> bool:
        """Its share of one version's verdicts in the window well above its share of the
        agent's before: a canary that fails where the rest of the fleet does not."""
        start = int((at - times.window_s) // 60)
        runs = sum(1 for r in mode.recent if r.at > at - times.window_s and r.version == version)
        if runs < times.min_runs:
            return False
        total = sum(n for m, n in self.by_version.get(version, {}).items() if m > start)
        then_total = sum(n for m, n in self.total.items() if m <= start)
        then_runs = sum(n for m, n in mode.buckets.items() if m <= start)
        expected = total * (then_runs + 0.5) / max(1, then_total)
        return runs >= times.jump * expected and _tail(runs, expected) < P_JUMP

    def _rates(self, mode: ModeCounts, at: float, times: ModeTimes) -> tuple[int, float]:
        """(its runs in the window ending at `at`, a window's runs on average before it)."""
        start = int((at - times.window_s) // 60)
        runs = sum(n for m, n in mode.buckets.items() if m > start)
        earlier = sum(n for m, n in mode.buckets.items() if m <= start)
        return runs, earlier / max(1.0, self._windows_before(at, times))

    def _windows_before(self, at: float, times: ModeTimes) -> float:
        """The windows of history before the current one the agent was watched in."""
        watched = min(times.history_s, at - self.since) - times.window_s
        return max(0.0, watched) / times.window_s

    def _jumped(self, mode: ModeCounts, at: float, times: ModeTimes, span: float, p: float) -> bool:
        """Its runs in the last `span` seconds well above what its share before predicts."""
        start = int((at - span) // 60)
        runs = sum(n for m, n in mode.buckets.items() if m > start)
        if runs < times.min_runs:
            return False
        expected = self._expected(mode, at, times, span)
        if runs < times.jump * expected or _tail(runs, expected) >= p:
            return False
        # a burst is also more than twice the most the mode ever had in as many minutes: a
        # frequent mode's runs cluster by chance far more often than a Poisson tail says (with
        # tens of modes an agent, a tail of 5e-3 is crossed somewhere every few windows)
        return span >= times.window_s or runs > BURST_OVER_PEAK * _peak(mode.buckets, start, at)

    def _expected(self, mode: ModeCounts, at: float, times: ModeTimes, span: float) -> float:
        """Its runs the last `span` seconds would hold at its share of the agent's verdicts in
        the history before the window."""
        start = int((at - span) // 60)
        now_total = sum(n for m, n in self.total.items() if m > start)
        before = int((at - times.window_s) // 60)
        then_total = sum(n for m, n in self.total.items() if m <= before)
        then_runs = sum(n for m, n in mode.buckets.items() if m <= before)
        # half a run more than it had: a mode seen once or never before is not taken as one
        # that can never come (its expectation would be nothing, any run a jump)
        return now_total * (then_runs + 0.5) / max(1, then_total)

    def _forget(self, at: float, times: ModeTimes) -> None:
        if int(at // 60) <= self.swept:
            return  # once a minute: a run costs its own mode's buckets, not every mode's
        self.swept = int(at // 60)
        oldest = int((at - times.history_s) // 60)
        every = (self.total, *self.by_version.values(), *(m.buckets for m in self.modes.values()))
        for buckets in every:
            for minute in [m for m in buckets if m <= oldest]:
                del buckets[minute]

    def _bound(self, times: ModeTimes) -> None:
        while len(self.modes) > times.max_modes:
            oldest = min(self.modes, key=lambda k: self.modes[k].last_seen)
            del self.modes[oldest]
            self.gone.add(oldest)

    def _said(
        self,
        kind: AlertKind,
        mode: ModeCounts,
        at: float,
        runs: int,
        before: float,
        times: ModeTimes,
        within: str | None = None,
    ) -> ModeAlert:
        window = [r for r in mode.recent if r.at > at - times.window_s]
        versions = Counter(r.version for r in window if r.version is not None)
        after = Counter(r.after for r in window if r.after is not None)
        fresh = None
        if len(versions) == 1 and sum(versions.values()) == len(window):
            (version,) = versions
            # all of it in a version the agent had not run before, where it had run another
            older = [v for v, first in self.versions.items() if v != version and first < at]
            if (
                older
                and mode.versions.get(version, 0.0) >= mode.first_seen
                and (self.versions.get(version, at) > at - times.window_s or kind == "new")
            ):
                fresh = version
        agent = self.agent_name
        name = mode.mode.name
        message = _message(kind, agent, name, runs, before, times, fresh, within)
        return ModeAlert(
            alert_id=ModeAlert.id_of(agent, mode.mode.key, kind, int(at // times.window_s)),
            kind=kind,
            agent_name=agent,
            mode=mode.mode,
            runs=runs,
            before=round(before, 2),
            window_s=times.window_s,
            first_seen=mode.first_seen,
            examples=[r.request_id for r in (window or mode.recent)[-EXAMPLES:]],
            versions=dict(versions.most_common(5)),
            new_in_version=fresh,
            version=within,
            after=dict(after.most_common(3)),
            message=message,
            ts=at,
        )


def _message(
    kind: AlertKind,
    agent: str | None,
    name: str,
    runs: int,
    before: float,
    times: ModeTimes,
    version: str | None,
    within: str | None = None,
) -> str:
    minutes = f"{times.window_s / 60:g} min"
    who = agent or "(no agent name)"
    if kind == "quiet":
        return f"{who}: quiet again for {minutes}: {name}"
    since = f" since version {version}" if version else ""
    if within:
        since += f" in version {within}"
    if kind == "new":
        return f"{who}: new failure mode{since}, {runs} runs in {minutes}: {name}"
    was = f"about {before:.1f} before"
    return f"{who}: failure mode jumped{since}, {runs} runs in {minutes} ({was}): {name}"


def _peak(buckets: dict[int, int], start: int, at: float) -> int:
    """The most runs any span of as many whole minutes as (`start`, now] held before it, in
    the history the buckets keep (at most an hour: 60 sums of a few minutes each, and only
    for a mode whose tail already says burst)."""
    width = int(at // 60) - start
    if not buckets or width <= 0:
        return 0
    first = min(buckets)
    spans = range(first, start + 1)
    return max(
        (sum(buckets.get(m, 0) for m in range(e - width + 1, e + 1)) for e in spans), default=0
    )


def _tail(runs: int, expected: float) -> float:
    """P(X >= runs) for X ~ Poisson(expected): how unlikely that many runs are by chance."""
    if expected <= 0:
        return 0.0
    if expected > 200:  # the normal approximation: no sum of thousands of terms
        return 0.5 * math.erfc((runs - 0.5 - expected) / math.sqrt(2 * expected))
    if runs > 10 * expected + 50:  # far in the tail: no need to sum
        return 0.0
    term = math.exp(-expected)
    below = 0.0
    for k in range(runs):
        below += term
        term *= expected / (k + 1)
    return max(0.0, 1.0 - below)
