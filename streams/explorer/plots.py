"""An agent's plot as inline SVG, drawn on the server: no script, no front-end build, and the
page shows the same thing in a browser, a screenshot or a test."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from html import escape

from tracejudge.streams.explorer.trends import WIDTH_NAMES, Binned, Bucket, Change

WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 44, 16, 16, 70
COUNT_SHARE = 0.25  # the verdicts-per-bin bars use the bottom quarter of the plot
# name, colour, dashes (the two rates often coincide: both stay visible), value
SERIES: tuple[tuple[str, str, str, Callable[[Bucket], float]], ...] = (
    ("score", "#2458b3", "none", lambda b: b.mean_score),
    ("alert rate %", "#c0392b", "none", lambda b: 100 * b.alert_rate),
    ("reflection rate %", "#d68910", "6 4", lambda b: 100 * b.reflection_rate),
)


def _clock(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%m-%d %H:%M")


def _runs(points: Sequence[Bucket]) -> list[list[Bucket]]:
    """Consecutive bins together: a line does not cross a stretch with no verdicts."""
    runs: list[list[Bucket]] = []
    for b in points:
        if runs and runs[-1][-1].end == b.start:
            runs[-1].append(b)
        else:
            runs.append([b])
    return runs


def _counts(
    points: Sequence[Bucket], x: Callable[[float], float], base: float, tallest: float
) -> list[str]:
    """One grey bar per bin, its height the bin's count against the largest, its count in its
    tooltip and its data-count."""
    most = max(b.count for b in points)
    bars = []
    for b in points:
        tall = tallest * b.count / most
        many = f"{b.count} verdict{'s' if b.count != 1 else ''}"
        bars.append(
            f'<rect class="count" data-count="{b.count}" x="{x(b.start) + 1:.1f}" '
            f'y="{base - tall:.1f}" width="{max(x(b.end) - x(b.start) - 2, 1):.1f}" '
            f'height="{tall:.1f}" fill="#c8ccd4"><title>{many}, '
            f"{_clock(b.start)}–{_clock(b.end)} UTC</title></rect>"
        )
    return bars


def plot(binned: Binned, changes: Sequence[Change]) -> str:
    """Score and rates (0-100) per bin, the verdicts in each bin as grey bars, a dashed line
    where the version changed; or, with too few verdicts for a trend, a sentence saying so."""
    if not binned.bins:
        return '<p class="empty">No verdicts for this agent yet.</p>'
    if not binned.trend:
        return f'<p class="empty" id="no-trend">Too few to show a trend: {escape(binned.why)}.</p>'
    points = binned.bins
    t0, t1 = points[0].start, points[-1].end
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    most = max(b.count for b in points)

    def x(ts: float) -> float:
        return LEFT + inner_w * (ts - t0) / (t1 - t0)

    def y(value: float) -> float:
        return TOP + inner_h * (1 - max(0.0, min(100.0, value)) / 100)

    parts = [
        f'<svg class="plot" role="img" aria-label="score, alert and reflection rates over time, '
        f'per {WIDTH_NAMES[binned.width]}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">'
    ]
    for level in (0, 25, 50, 75, 100):
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(level):.1f}" '
            f'y2="{y(level):.1f}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{y(level) + 4:.1f}" text-anchor="end" font-size="11">'
            f"{level}</text>"
        )
    parts.extend(_counts(points, x, TOP + inner_h, inner_h * COUNT_SHARE))
    for ts, anchor in ((t0, "start"), ((t0 + t1) / 2, "middle"), (t1, "end")):
        parts.append(
            f'<text x="{x(ts):.1f}" y="{TOP + inner_h + 16}" text-anchor="{anchor}" '
            f'font-size="11">{_clock(ts)} UTC</text>'
        )
    parts.append(
        f'<text x="{WIDTH - RIGHT}" y="{TOP + inner_h + 32}" text-anchor="end" font-size="11" '
        f'fill="#555">{binned.count} verdicts in bins of {WIDTH_NAMES[binned.width]}; '
        f"grey bars: verdicts per bin (tallest {most})</text>"
    )
    for change in changes:
        cx = x(change.ts)
        parts.append(
            f'<g class="version-change"><line x1="{cx:.1f}" x2="{cx:.1f}" y1="{TOP}" '
            f'y2="{TOP + inner_h}" stroke="#555" stroke-dasharray="4 3"/>'
            f'<text x="{cx + 3:.1f}" y="{TOP + 10}" font-size="11">'
            f"{escape(change.after_version)}</text></g>"
        )
    for name, colour, dashes, value in SERIES:
        parts.append(f'<g class="series" data-series="{escape(name)}">')
        for run in _runs(points):
            mids = [((b.start + b.end) / 2, value(b), b) for b in run]
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v, _ in mids)
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                f'stroke-dasharray="{dashes}" points="{path}"/>'
            )
            for t, v, b in mids:
                parts.append(
                    f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}">'
                    f"<title>{escape(name)} {v:.0f}: {b.count} verdict"
                    f"{'s' if b.count != 1 else ''}, "
                    f"{_clock(b.start)}–{_clock(b.end)} UTC</title></circle>"
                )
        parts.append("</g>")
    legend_x = LEFT
    for name, colour, _, _ in SERIES:
        parts.append(
            f'<rect x="{legend_x}" y="{HEIGHT - 10}" width="10" height="4" fill="{colour}"/>'
            f'<text x="{legend_x + 14}" y="{HEIGHT - 5}" font-size="11">{escape(name)}</text>'
        )
        legend_x += 150
    parts.append("</svg>")
    return "".join(parts)
