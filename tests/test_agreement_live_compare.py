"""The rule benchmarks/agreement_live.py judges live against offline figures by:
counts exact, AUC within 0.005."""

from __future__ import annotations

from benchmarks.agreement_live import equal, row
from tracejudge.judges.agreement.tally import Kept, Tally, Truth, View, cells


def figures(*runs: tuple[int, bool]) -> dict[str, object]:
    tally = Tally()
    for score, ok in runs:
        kept = Kept("a", None, 60, View.of(score, 60, True, False))
        tally.add(cells(kept, Truth(ok, "label")))
    return row(tally.figures(agent="a").as_dict())


def test_counts_must_match_exactly_and_auc_within_tolerance() -> None:
    base = figures((90, True), (80, True), (50, False), (70, False))
    assert equal(base, figures((90, True), (80, True), (50, False), (70, False)))
    # one run alerted on one side only: the same AUC, a count off by one
    assert not equal(base, figures((90, True), (80, True), (50, False), (55, False)))
    assert not equal(base, {**base, "auc": base["auc"] + 0.006})  # type: ignore[operator]
    assert equal(base, {**base, "auc": base["auc"] + 0.004})  # type: ignore[operator]
    assert not equal(base, None)  # an agent missing from one reading


def test_a_missing_auc_only_equals_a_missing_auc() -> None:
    only_ok = figures((90, True), (80, True))
    assert only_ok["auc"] is None
    assert equal(only_ok, figures((90, True), (80, True)))
    assert not equal(only_ok, {**only_ok, "auc": 0.5})
