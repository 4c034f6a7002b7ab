"""An agent's plot as inline SVG, drawn on the server: no script, no front-end build, and the
page shows the same thing in a browser, a screenshot or a test."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from html import escape

from tracejudge.streams.ui.trends import Bucket, Change

WIDTH, HEIGHT = 760, 280
LEFT, RIGHT, TOP, BOTTOM = 44, 16, 16, 50
# name, colour, dashes (the two rates often coincide: both stay visible), value
SERIES: tuple[tuple[str, str, str, Callable[[Bucket], float]], ...] = (
    ("score", "#2458b3", "none", lambda b: b.mean_score),
    ("alert rate %", "#c0392b", "none", lambda b: 100 * b.alert_rate),
    ("reflection rate %", "#d68910", "6 4", lambda b: 100 * b.reflection_rate),
)


def _clock(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%m-%d %H:%M:%S")


def plot(points: Sequence[Bucket], changes: Sequence[Change]) -> str:
    """Score and rates (0-100) over time, a dashed line where the version changed."""
    if not points:
        return '<p class="empty">No verdicts for this agent yet.</p>'
    t0 = points[0].start
    t1 = max(points[-1].end, t0 + 1e-9)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(ts: float) -> float:
        return LEFT + inner_w * (ts - t0) / (t1 - t0)

    def y(value: float) -> float:
        return TOP + inner_h * (1 - max(0.0, min(100.0, value)) / 100)

    parts = [
        f'<svg class="plot" role="img" aria-label="score, alert and reflection rates over time" '
        f'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}">'
    ]
    for level in (0, 25, 50, 75, 100):
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(level):.1f}" '
            f'y2="{y(level):.1f}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{y(level) + 4:.1f}" text-anchor="end" font-size="11">'
            f"{level}</text>"
        )
    for ts, anchor in ((t0, "start"), (t1, "end")):
        parts.append(
            f'<text x="{x(ts):.1f}" y="{TOP + inner_h + 16}" text-anchor="{anchor}" '
            f'font-size="11">'
            f"{_clock(ts)} UTC</text>"
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
        mids = [((b.start + b.end) / 2, value(b), b) for b in points]
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v, _ in mids)
        parts.append(
            f'<g class="series" data-series="{escape(name)}">'
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
            f'stroke-dasharray="{dashes}" points="{path}"/>'
        )
        for t, v, b in mids:
            parts.append(
                f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}">'
                f"<title>{escape(name)} {v:.0f} ({b.count} requests, from "
                f"{_clock(b.start)})</title></circle>"
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
