"""How often each rule fires on ok and on failed runs: the per-rule table of `tracejudge
agreement` and `python -m benchmarks.agreement`.

A rule that fires on ok runs nearly as often as on failed ones says nothing about the outcome,
however often it fires; one that fired on a handful of runs says nothing yet. The table names
both, so a team sees which findings to trust for its agent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tracejudge.judges.agreement.tally import Share

USELESS_RATIO = 0.8  # fires on ok runs at this share (or more) of its rate on failed runs
MIN_FIRED = 5  # runs a rule must fire on before its rates say anything


@dataclass(frozen=True)
class RuleRate:
    """One rule: the ok runs and the failed runs it fired on, out of each."""

    rule: str
    on_ok: Share
    on_failed: Share

    @property
    def fired(self) -> int:
        return self.on_ok.hits + self.on_failed.hits

    @property
    def ratio(self) -> float:
        ok, failed = self.on_ok.value or 0.0, self.on_failed.value or 0.0
        return ok / failed if failed else float("inf") if ok else 0.0

    @property
    def precision(self) -> Share:
        """Of the runs it fired on, the share that failed."""
        return Share(self.on_failed.hits, self.fired)

    @property
    def useless(self) -> bool:
        """No better than chance: fires on ok runs at 80 % or more of its rate on failed runs,
        on enough runs to tell."""
        ok, failed = self.on_ok.value or 0.0, self.on_failed.value or 0.0
        return ok > 0 and ok >= USELESS_RATIO * failed and self.fired >= MIN_FIRED

    def note(self) -> str:
        if self.useless:
            return "no better than chance"
        if self.fired < MIN_FIRED:
            runs = "run" if self.fired == 1 else "runs"
            return f"fired on {self.fired} {runs}: too few to tell"
        return ""

    def as_dict(self) -> dict[str, Any]:
        def share(s: Share) -> dict[str, Any]:
            return {"value": s.value, "hits": s.hits, "count": s.count, "interval": s.interval}

        ratio = self.ratio
        return {
            "rule": self.rule,
            "on_ok": share(self.on_ok),
            "on_failed": share(self.on_failed),
            "ratio": None if ratio == float("inf") else ratio,  # JSON has no infinity
            "precision": share(self.precision),
            "note": self.note() or None,
        }


NAME_WIDTH_MAX = 60


def rule_rates(runs: Iterable[tuple[Iterable[str], bool]]) -> list[RuleRate]:
    """`runs`: each labelled run's findings (rule names, repeats counted once) and whether it
    was ok. One row per rule that fired, by name."""
    n_ok = n_failed = 0
    on_ok: Counter[str] = Counter()
    on_failed: Counter[str] = Counter()
    for findings, ok in runs:
        fired = set(findings)
        if ok:
            n_ok += 1
            on_ok.update(fired)
        else:
            n_failed += 1
            on_failed.update(fired)
    return [
        RuleRate(rule, Share(on_ok[rule], n_ok), Share(on_failed[rule], n_failed))
        for rule in sorted(set(on_ok) | set(on_failed))
    ]


def rule_table(rates: Iterable[RuleRate]) -> list[str]:
    """The table as printed, a header and a line per rule."""
    rates = list(rates)
    # as wide as the longest name (a team's check is `check:module:function`), within reason:
    # a longer one is cut, marked, so the columns stay columns
    width = min(NAME_WIDTH_MAX, max([28, *(len(r.rule) for r in rates)]))
    lines = [f"  {'rule':<{width}} {'on ok':>7} {'on failed':>10}  ok/failed"]
    for r in rates:
        name = r.rule if len(r.rule) <= width else r.rule[: width - 1] + "…"
        ok, failed = r.on_ok.value or 0.0, r.on_failed.value or 0.0
        note = r.note()
        if r.useless:
            note = f"  <- {note}"
        elif note:
            note = f"  ({note})"
        lines.append(f"  {name:<{width}} {ok:>7.1%} {failed:>10.1%}  {r.ratio:8.2f}{note}")
    return lines
