"""How verdicts agree with ground truth: pure arithmetic shared by `tracejudge replay --labels`
and the benchmarks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def auc(scores: Mapping[str, float], ok: Mapping[str, bool]) -> float:
    """Probability that an ok run scores above a failed one (ties count half)."""
    good = [scores[r] for r in ok if ok[r] and r in scores]
    bad = [scores[r] for r in ok if not ok[r] and r in scores]
    wins = sum(1.0 if g > b else 0.5 if g == b else 0.0 for g in good for b in bad)
    return wins / (len(good) * len(bad)) if good and bad else float("nan")


def label_ok(value: Any) -> bool | None:
    """A ground-truth label in the usual shapes: a bool, a reward (>= 0.5 is ok), or an object
    with `ok`, `success` or `reward`. None when it is none of these."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value >= 0.5
    if isinstance(value, Mapping):
        for key in ("ok", "success", "reward"):
            if key in value:
                return label_ok(value[key])
    return None
