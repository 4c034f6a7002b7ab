"""The reliability plot of an agent's verdicts against their outcomes, as inline SVG drawn on the
server (as the agent's plot over time is): per score bin, the share of runs that turned out ok,
with its 95 % interval, against the bin's mean score / 100; the diagonal is where a score would
read as a probability of success. A point's area grows with its bin's runs."""

from __future__ import annotations

import math
from html import escape

from tracejudge.judges.agreement.tally import Bin, Figures

SIZE = 360  # the plot's side: a square, as both axes run 0..1
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 12, 44
R_MIN, R_MAX = 3.0, 11.0  # the radius of a bin's point, fewest to most runs


def _pct(value: float) -> str:
    return f"{100 * value:.0f}%"


def describe(b: Bin) -> str:
    """One bin in words: the point's tooltip and the table's row say the same."""
    share, interval = b.ok_share.value, b.ok_share.interval
    if share is None or interval is None or b.mean_score is None:
        return f"scores {b.low}–{b.high}: no runs"
    return (
        f"scores {b.low}–{b.high}: {b.runs} run{'s' if b.runs != 1 else ''}, {b.ok} ok "
        f"({_pct(share)}, 95% {_pct(interval[0])}–{_pct(interval[1])}), "
        f"mean score {b.mean_score:.1f}"
    )


def reliability_plot(f: Figures, label: str = "final verdicts") -> str:
    """The figures' calibration bins as an SVG (empty bins are left out), with a title and a
    description for screen readers; the page puts the numbers in a table beside it."""
    filled = [b for b in f.calibration if b.runs and b.mean_score is not None]
    if not filled:
        return '<p class="empty">No runs with outcomes to plot.</p>'
    inner = SIZE - LEFT - RIGHT
    height = TOP + inner + BOTTOM
    most = max(b.runs for b in filled)

    def x(score: float) -> float:
        return LEFT + inner * max(0.0, min(100.0, score)) / 100

    def y(share: float) -> float:
        return TOP + inner * (1 - max(0.0, min(1.0, share)))

    title = f"Reliability of the {label}: share of runs ok per score bin"
    desc = (
        f"{f.runs} runs with outcomes in {len(filled)} score bins. "
        + "; ".join(describe(b) for b in filled)
        + ". The dashed diagonal is where the share ok equals the score / 100."
    )
    parts = [
        f'<svg class="reliability" role="img" aria-labelledby="reliability-title '
        f'reliability-desc" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {SIZE} {height}" '
        f'width="{SIZE}" height="{height}">'
        f'<title id="reliability-title">{escape(title)}</title>'
        f'<desc id="reliability-desc">{escape(desc)}</desc>'
    ]
    for level in (0, 25, 50, 75, 100):
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + inner}" y1="{y(level / 100):.1f}" '
            f'y2="{y(level / 100):.1f}" stroke="#e3e3e3"/>'
            f'<text x="{LEFT - 6}" y="{y(level / 100) + 4:.1f}" text-anchor="end" '
            f'font-size="11">{level}%</text>'
            f'<line x1="{x(level):.1f}" x2="{x(level):.1f}" y1="{TOP}" y2="{TOP + inner}" '
            f'stroke="#e3e3e3"/>'
            f'<text x="{x(level):.1f}" y="{TOP + inner + 15}" text-anchor="middle" '
            f'font-size="11">{level}</text>'
        )
    parts.append(
        f'<text x="{LEFT + inner / 2:.1f}" y="{TOP + inner + 32}" text-anchor="middle" '
        f'font-size="11" fill="#555">verdict score (the bin\'s mean)</text>'
        f'<text transform="translate(12 {TOP + inner / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle" font-size="11" fill="#555">runs ok</text>'
        f'<line class="diagonal" x1="{x(0):.1f}" y1="{y(0):.1f}" x2="{x(100):.1f}" '
        f'y2="{y(1):.1f}" stroke="#888" stroke-dasharray="5 4"/>'
    )
    for b in filled:
        share, interval = b.ok_share.value, b.ok_share.interval
        assert share is not None and interval is not None and b.mean_score is not None
        cx = x(b.mean_score)
        radius = R_MIN + (R_MAX - R_MIN) * math.sqrt(b.runs / most)  # area by runs
        parts.append(
            f'<g class="bin" data-low="{b.low}" data-high="{b.high}" data-runs="{b.runs}" '
            f'data-ok="{b.ok}" data-mean="{b.mean_score:.2f}" data-share="{share:.4f}">'
            f"<title>{escape(describe(b))}</title>"
            f'<line class="interval" x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(interval[0]):.1f}" '
            f'y2="{y(interval[1]):.1f}" stroke="#2458b3" stroke-width="1.5"/>'
            f'<circle cx="{cx:.1f}" cy="{y(share):.1f}" r="{radius:.1f}" fill="#2458b3" '
            f'fill-opacity="0.75"/></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
