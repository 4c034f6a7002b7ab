"""An agent's verdicts over time: rates in bins of a round width for the plot, the points where
its version changed, and the figures before and after each change, with honest intervals."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tracejudge.streams.explorer.store import Verdict

# Bin widths, the finest first: round ones, so that a bin reads as "12:05-12:10", and none under
# a minute, since arrivals within a minute (a replay, a burst) say how traffic came, not how the
# agent drifted. The finest width that gives at most MAX_BINS bins over the verdicts' span is
# used (between about 7 and 40 bins, as the widths grow by at most 7 times).
WIDTHS_S = (60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400)
MAX_BINS = 40
# When a line is drawn at all. With fewer than MIN_BINS bins holding verdicts, a line has too
# few points to tell a drift from noise (two points always make a line, three a "curve"); with
# fewer than MIN_VERDICTS in all, bins hold a handful each and a rate over three verdicts moves
# in steps of 33 points. Below either, the page says so instead of drawing a trend that is not.
MIN_BINS = 5
MIN_VERDICTS = 20

Z95 = statistics.NormalDist().inv_cdf(0.975)
# Student's t, 97.5 % quantile, for 1 to 30 degrees of freedom (the standard tables); above 30
# the Cornish-Fisher expansion below is within 1e-4 of it (no scipy for one number)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def t975(df: int) -> float:
    """The t distribution's 97.5 % quantile with `df` degrees of freedom (df >= 1)."""
    if df <= len(T975):
        return T975[df - 1]
    z = Z95
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def wilson(hits: int, n: int) -> tuple[float, float] | None:
    """The Wilson 95 % interval of a rate: never zero wide, and inside 0..1 even at 0 or n hits,
    where the normal approximation claims certainty (4 of 4 passed reads 51-100 %, not 100 %)."""
    if n == 0:
        return None
    p = hits / n
    z2 = Z95**2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # at 0 or n hits the bound is 0 or 1 exactly (the formula leaves a rounding error there)
    return (0.0 if hits == 0 else centre - half), (1.0 if hits == n else centre + half)


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
class Binned:
    """The verdicts in bins of `width` seconds (those holding verdicts, oldest first), and
    whether they are enough to show a trend (`why` says, when not)."""

    width: int
    bins: list[Bucket]
    count: int
    trend: bool
    why: str


@dataclass(frozen=True)
class Figures:
    """What one stretch of verdicts looks like."""

    count: int
    mean_score: float
    # half width of the mean's 95 % interval (Student's t); None with fewer than two verdicts,
    # or when every score is the same: a zero-wide interval would claim a certainty they lack
    score_ci95: float | None
    pass_rate: float
    alert_rate: float
    reflection_rate: float
    pass_ci: tuple[float, float] | None = None  # Wilson 95 %
    alert_ci: tuple[float, float] | None = None
    reflection_ci: tuple[float, float] | None = None


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
        return Figures(0, 0.0, None, 0.0, 0.0, 0.0)
    scores = [v.score for v in verdicts]
    spread = statistics.stdev(scores) if n > 1 else 0.0
    passed = sum(v.passed for v in verdicts)
    alerted = sum(v.alerts > 0 for v in verdicts)
    reflected = sum(v.reflections > 0 for v in verdicts)
    return Figures(
        count=n,
        mean_score=statistics.fmean(scores),
        score_ci95=t975(n - 1) * spread / math.sqrt(n) if spread > 0 else None,
        pass_rate=passed / n,
        alert_rate=alerted / n,
        reflection_rate=reflected / n,
        pass_ci=wilson(passed, n),
        alert_ci=wilson(alerted, n),
        reflection_ci=wilson(reflected, n),
    )


def duration(seconds: float) -> str:
    """`seconds` as a person reads it: 3 s, 12 min, 5 h, 2 days."""
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            value = round(seconds / size)
            return f"{value} {unit}s" if unit == "day" and value != 1 else f"{value} {unit}"
    return f"{seconds:.0f} s"


WIDTH_NAMES = {60: "1 minute", 300: "5 minutes", 900: "15 minutes", 3600: "1 hour",
               6 * 3600: "6 hours", 86400: "1 day", 7 * 86400: "1 week"}  # fmt: skip


def bins(verdicts: Sequence[Verdict]) -> Binned:
    """The verdicts (oldest first) in bins on round boundaries of UTC time."""
    if not verdicts:
        return Binned(WIDTHS_S[0], [], 0, False, "no verdicts")
    first, last = verdicts[0].ts, verdicts[-1].ts
    width = next((w for w in WIDTHS_S if last // w - first // w + 1 <= MAX_BINS), WIDTHS_S[-1])
    slices: dict[int, list[Verdict]] = {}
    for v in verdicts:
        slices.setdefault(int(v.ts // width), []).append(v)
    out = []
    for index in sorted(slices):
        f = figures(slices[index])
        out.append(
            Bucket(
                start=index * width,
                end=(index + 1) * width,
                count=f.count,
                mean_score=f.mean_score,
                pass_rate=f.pass_rate,
                alert_rate=f.alert_rate,
                reflection_rate=f.reflection_rate,
            )
        )
    n = len(verdicts)
    trend = n >= MIN_VERDICTS and len(out) >= MIN_BINS
    why = (
        ""
        if trend
        else f"{n} verdict{'s' if n != 1 else ''} within {duration(last - first)}, in "
        f"{len(out)} bin{'s' if len(out) != 1 else ''} of {WIDTH_NAMES[width]}; a trend needs "
        f"at least {MIN_VERDICTS} verdicts in at least {MIN_BINS} bins (the finest bin is 1 "
        "minute: verdicts that came within a minute of each other tell how they arrived, not "
        "how the agent changed)"
    )
    return Binned(width, out, n, trend, why)


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
