"""The agreement arithmetic every surface shares (judges/agreement/tally.py)."""

from __future__ import annotations

import random

import pytest

from tracejudge.judges.agreement.tally import (
    Cell,
    Kept,
    Tally,
    Truth,
    View,
    auc,
    auc_of_histograms,
    cells,
    wilson,
)


def test_the_auc_from_histograms_is_the_pairwise_auc_exactly() -> None:
    rng = random.Random(7)
    for _ in range(20):
        scores = {f"r{i}": rng.choice([rng.randint(0, 100), 50, 60]) for i in range(120)}
        ok = {r: rng.random() < 0.6 for r in scores}
        ok_hist: dict[int, int] = {}
        failed_hist: dict[int, int] = {}
        for r, s in scores.items():
            h = ok_hist if ok[r] else failed_hist
            h[s] = h.get(s, 0) + 1
        assert auc_of_histograms(ok_hist, failed_hist) == pytest.approx(auc(scores, ok), abs=1e-12)
    assert auc_of_histograms({50: 3}, {}) is None


def test_wilson_interval_matches_the_textbook_values() -> None:
    low, high = wilson(8, 10) or (0.0, 0.0)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    assert wilson(0, 0) is None


def test_a_kept_verdict_is_small_and_reads_back_the_same() -> None:
    kept = Kept(
        agent="customer-service-agent",
        version="2.4.1",
        threshold=60,
        rules=View(72, False, True),
        judge=View(35, True, True),
        blend=View(57, True, True),
        findings=("unrecovered_failure", "says_work_remains", "claim_without_call"),
        calibration="cal-3f9a2c",
        ts=1_790_000_000.123,
    )
    encoded = kept.encode()
    assert len(encoded.encode()) <= 100
    back = Kept.decode(encoded)
    assert back == Kept(**{**kept.__dict__, "ts": 1_790_000_000.0})
    # a finding no bit names (a rule added later) is kept by its name
    newer = Kept("a", None, 60, View(10, True, True), findings=("a_rule_added_later",))
    assert Kept.decode(newer.encode()).findings == ("a_rule_added_later",)
    plain = Kept(None, None, 60, View(80, False, False))
    assert Kept.decode(plain.encode()) == plain and not plain.judged


def test_figures_per_verdict_source_and_the_final_view() -> None:
    tally = Tally()
    judged = Kept("a", None, 60, View(80, False, False), View(20, True, True), View(56, True, True))
    rules_only = Kept("a", None, 60, View(30, True, True))
    tally.add(cells(judged, Truth(False, "human")))
    tally.add(cells(rules_only, Truth(True, "human")))
    tally.add(cells(rules_only, Truth(True, "human")), times=-1)  # replaced: gone again
    tally.add(cells(rules_only, Truth(False, "human")))
    final = tally.figures("final")
    assert (final.runs, final.failed_runs, final.failed_flagged.hits) == (2, 2, 2)
    assert tally.figures("judge").runs == 1 and tally.figures("rules").runs == 2
    assert tally.figures("rules", judged=True).failed_flagged.hits == 0  # rules missed it
    back = Tally.of_json(tally.to_json())
    assert back.counts == tally.counts
    assert Cell.of_key(next(iter(tally.counts)).key()) in tally.counts


def test_alert_precision_ok_alerted_and_calibration_bins() -> None:
    tally = Tally()
    for score, ok in [(10, False), (15, False), (20, True), (90, True), (95, True), (99, False)]:
        tally.add(cells(Kept("a", "1", 60, View.of(score, 60, True, False)), Truth(ok, "test")))
    f = tally.figures("rules", agent="a", version="1", source="test")
    assert (f.ok_alerted.hits, f.ok_alerted.count) == (1, 3)
    assert (f.alert_precision.hits, f.alert_precision.count) == (2, 3)
    assert f.auc == pytest.approx(
        auc(
            {str(i): s for i, s in enumerate([10, 15, 20, 90, 95, 99])},
            {str(i): o for i, o in enumerate([False, False, True, True, True, False])},
        )
    )
    top = f.calibration[-1]
    assert (top.low, top.high, top.runs, top.ok) == (90, 100, 3, 2)
    assert f.auc_interval is not None and f.auc_interval[0] <= (f.auc or 0) <= f.auc_interval[1]
