"""An agent's verdicts over time: bucketed rates for the plot, the points where its version
changed, and the figures before and after each change."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tracejudge.streams.ui.store import Verdict

MAX_BUCKETS = 40


@dataclass(frozen=True)
class Bucket:
    start: float
    end: float
    count: int
    mean_score: float
    pass_rate: float  # 0..1
    alert_rate: float  # requests with at least one alert
    reflection_rate: float  # requests that asked for a reflection


@dataclass(frozen=True)
class Figures:
    """What one stretch of verdicts looks like."""

    count: int
    mean_score: float
    score_ci95: float  # half width of the mean's 95 % interval (normal approximation)
    pass_rate: float
    alert_rate: float
    reflection_rate: float


@dataclass(frozen=True)
class Change:
    ts: float
    before_version: str
    after_version: str
    before: Figures
    after: Figures


def figures(verdicts: Sequence[Verdict]) -> Figures:
    n = len(verdicts)
    if n == 0:
        return Figures(0, 0.0, 0.0, 0.0, 0.0, 0.0)
    scores = [v.score for v in verdicts]
    spread = statistics.stdev(scores) if n > 1 else 0.0
    return Figures(
        count=n,
        mean_score=statistics.fmean(scores),
        score_ci95=1.96 * spread / math.sqrt(n),
        pass_rate=sum(v.passed for v in verdicts) / n,
        alert_rate=sum(v.alerts > 0 for v in verdicts) / n,
        reflection_rate=sum(v.reflections > 0 for v in verdicts) / n,
    )


def buckets(verdicts: Sequence[Verdict], max_buckets: int = MAX_BUCKETS) -> list[Bucket]:
    """Equal time slices over the verdicts' span (oldest first); empty slices left out."""
    if not verdicts:
        return []
    first, last = verdicts[0].ts, verdicts[-1].ts
    width = max((last - first) / max_buckets, 1e-9)
    slices: dict[int, list[Verdict]] = {}
    for v in verdicts:
        slices.setdefault(min(int((v.ts - first) / width), max_buckets - 1), []).append(v)
    out = []
    for index in sorted(slices):
        f = figures(slices[index])
        out.append(
            Bucket(
                start=first + index * width,
                end=first + (index + 1) * width,
                count=f.count,
                mean_score=f.mean_score,
                pass_rate=f.pass_rate,
                alert_rate=f.alert_rate,
                reflection_rate=f.reflection_rate,
            )
        )
    return out


def changes(verdicts: Sequence[Verdict]) -> list[Change]:
    """Each version's first verdict (oldest first) after the first version's, with the figures
    of every verdict of the version in use before it against every verdict of the new one.

    By version, not by stretch of time: a rollout or a canary runs both versions side by side
    for a while, and each flip between them is not a change.
    """
    by_version: dict[str, list[Verdict]] = {}
    for v in verdicts:
        if v.version is not None:
            by_version.setdefault(v.version, []).append(v)
    order = sorted(by_version, key=lambda version: by_version[version][0].ts)
    return [
        Change(
            ts=by_version[new][0].ts,
            before_version=old,
            after_version=new,
            before=figures(by_version[old]),
            after=figures(by_version[new]),
        )
        for old, new in itertools.pairwise(order)
    ]
