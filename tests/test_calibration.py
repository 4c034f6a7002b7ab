"""Calibrated alerts: the threshold rule, the verdicts made after a calibration, and
the refresher that learns calibrations from the agreement tally."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from tests.memory import memory_worker
from tests.test_worker_handlers import final, start, tool
from tracejudge.judges.agreement.calibration import (
    Calibration,
    CalibrationBook,
    CalibrationRule,
    calibrate,
    calibrate_all,
    conformal_threshold,
)
from tracejudge.judges.agreement.tally import Cell, Tally
from tracejudge.settings import Settings
from tracejudge.streams.agreement.calibrations import CalibrationRefresher, refresher_of

AGENT = "shop-bot"


def tally_of(agent: str, ok: dict[int, int], failed: dict[int, int], judged: bool = False) -> Tally:
    """What the agreement store would hold for these runs: per run one cell per verdict source
    ("rules" always; "judge" and "blend" when the judge answered)."""
    views = ("rules", "judge", "blend") if judged else ("rules",)
    counts: Counter[Cell] = Counter()
    for is_ok, hist in ((True, ok), (False, failed)):
        for score, n in hist.items():
            for view in views:
                # the rules' view of a judged run says otherwise: only the blend may count
                shown = score if view != "rules" or not judged else 100 - score
                counts[Cell(agent, "", view, "test", judged, is_ok, shown, False, False)] += n
    return Tally(counts)


# -- the rule ----------------------------------------------------------------------------------


def test_the_threshold_keeps_the_target_with_the_conformal_margin() -> None:
    # 39 ok runs, one at each score 50..88: (below + 1) / 40 <= 5 % allows one run below
    ok = dict.fromkeys(range(50, 89), 1)
    assert conformal_threshold(ok, 0.05) == 51  # alerts the run at 50 only: 1/39 of ok runs
    # (the plain empirical rule would take 52: 2/39 = 5.1 % is over, 1/39 under)
    assert conformal_threshold(ok, 0.10) == 53  # three below: (3 + 1) / 40 = 10 %


def test_ties_are_never_cut_the_threshold_stays_below_them() -> None:
    # 40 ok runs, 10 of them tied at the lowest score: alerting the tie would alert 25 %
    ok = {50: 10, 80: 30}
    assert conformal_threshold(ok, 0.05) == 50  # nothing alerted: below the tie
    assert calibrate(AGENT, ok, 10, CalibrationRule(0.05, 30, 10), 0.0) == Calibration.of(
        AGENT, 50, 0.05, 40, 10, 0.0
    )
    # the tie at the top of the allowance: 1 run at 40, then 39 at 90 -> 90 alerts 1/40
    assert conformal_threshold({40: 1, 90: 39}, 0.05) == 90


def test_no_calibration_below_the_minimums_or_without_room_for_the_target() -> None:
    rule = CalibrationRule(0.05, min_ok_runs=30, min_failed_runs=10)
    assert calibrate(AGENT, {80: 29}, 50, rule, 0.0) is None  # too few ok runs
    assert calibrate(AGENT, {80: 200}, 9, rule, 0.0) is None  # too few failed runs
    assert calibrate(AGENT, {80: 200}, 0, rule, 0.0) is None  # both kinds must be present
    # 18 ok runs: one new ok run falls below the lowest with chance 1/19 > 5 %: no threshold
    assert conformal_threshold(dict.fromkeys(range(50, 68), 1), 0.05) is None
    loose = CalibrationRule(0.05, min_ok_runs=1, min_failed_runs=1)
    assert calibrate(AGENT, dict.fromkeys(range(50, 68), 1), 5, loose, 0.0) is None
    with pytest.raises(ValueError, match="target"):
        CalibrationRule(target=0.0)


def test_only_the_published_view_counts_and_ids_are_deterministic() -> None:
    rule = CalibrationRule(0.05, 30, 10)
    # judged runs: the blend (published) decides, the rules' own view (100 - score) does not
    tally = tally_of(AGENT, dict.fromkeys(range(60, 100), 1), {30: 10}, judged=True)
    (c,) = calibrate_all(tally, rule, at=5.0)
    assert (c.threshold, c.ok_runs, c.failed_runs) == (61, 40, 10)
    (again,) = calibrate_all(tally, rule, at=99.0)
    assert again.id == c.id and again.learned_at == 99.0  # same outcomes, same calibration
    more = tally_of(AGENT, dict.fromkeys(range(60, 101), 1), {30: 10}, judged=True)
    assert calibrate_all(more, rule, 5.0)[0].id != c.id
    # an agent without enough outcomes gets none, the other keeps its own
    tally.merge(tally_of("other", {90: 5}, {10: 5}))
    assert [x.agent for x in calibrate_all(tally, rule, 0.0)] == [AGENT]


def test_the_book_reads_a_run_without_agent_name_as_the_tally_files_it() -> None:
    book = CalibrationBook()
    (c,) = calibrate_all(tally_of("(no agent name)", {80: 40}, {20: 10}), CalibrationRule(), 0.0)
    book.replace([c])
    assert book.get(None) is c and book.get("") is c and book.get(AGENT) is None


# -- verdicts made after -----------------------------------------------------------------------


def run(rid: str) -> list[dict[str, Any]]:
    events = [start(rid), tool(1, rid=rid), tool(2, rid=rid), final(rid)]
    return [{**e, "agent_name": AGENT} for e in events]


class FakeTally:
    """A tally source in memory (the agreement store's `tally`), failing when told to."""

    def __init__(self, tally: Tally) -> None:
        self.value = tally
        self.fail: Exception | None = None

    async def tally(self, since: float | None = None) -> Tally:
        if self.fail is not None:
            raise self.fail
        return self.value


async def test_an_evaluation_after_a_calibration_uses_its_threshold_and_says_so() -> None:
    w = memory_worker()
    for event in run("before"):
        await w.event(event)
    (before,) = w.channel("evaluations").values()
    assert before["calibration"] is None and before["warn_threshold"] == 60 and before["passed"]
    score = before["overall_score"]
    # this agent's ok runs all score above this run: its calibrated threshold alerts it
    ok = {min(100, score + 1): 20, 100: 20}
    source = FakeTally(tally_of(AGENT, ok, {10: 12}))
    refresher = CalibrationRefresher(source, w.ctx.calibration_book, CalibrationRule(0.05, 30, 10))
    assert await refresher.refresh()
    (c,) = w.ctx.calibration_book.by_agent.values()
    assert c.threshold == score + 1
    for event in run("after"):
        await w.event(event)
    after = w.channel("evaluations").values()[-1]
    assert after["overall_score"] == score  # the same run: only the threshold changed
    assert after["warn_threshold"] == c.threshold and not after["passed"]
    assert after["calibration"] == {
        "id": c.id,
        "threshold": c.threshold,
        "target": 0.05,
        "ok_runs": 40,
        "failed_runs": 12,
    }
    words = (
        f"alert threshold {c.threshold}, calibrated for agent {AGENT} from 52 outcomes "
        f"(40 ok, 12 failed) to alert at most 5 % of its ok runs (calibration {c.id})"
    )
    assert words in after["reasons"]
    (alert,) = w.channel("alerts").values()
    assert alert["kind"] == "low_score" and f"below threshold {c.threshold}" in alert["message"]
    # another agent's runs keep the configured threshold
    for event in run("other"):
        await w.event({**event, "agent_name": "another-bot"})
    other = w.channel("evaluations").values()[-1]
    assert other["warn_threshold"] == 60 and other["calibration"] is None


async def test_calibration_off_keeps_the_configured_threshold() -> None:
    w = memory_worker(calibration_enabled=False)
    book = w.ctx.calibration_book
    await CalibrationRefresher(
        FakeTally(tally_of(AGENT, {100: 40}, {0: 10})), book, CalibrationRule()
    ).refresh()
    for event in run("r"):
        await w.event(event)
    (e,) = w.channel("evaluations").values()
    assert e["warn_threshold"] == 60 and e["calibration"] is None
    source = FakeTally(Tally())
    assert refresher_of(Settings(redis_url="", calibration_enabled=False), book, source) is None
    assert refresher_of(Settings(redis_url=""), book, None) is None  # no Redis: nothing to learn


# -- the refresher -----------------------------------------------------------------------------


async def test_the_refresher_follows_the_tally_and_keeps_the_book_when_it_cannot_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    book = CalibrationBook()
    source = FakeTally(tally_of(AGENT, dict.fromkeys(range(60, 100), 1), {20: 10}))
    settings = Settings(redis_url="", calibration_target=0.1, calibration_refresh_s=5)
    refresher = refresher_of(settings, book, source, clock=lambda: 42.0)
    assert refresher is not None and refresher.interval_s == 5
    with caplog.at_level(logging.INFO, "tracejudge.streams.agreement.calibrations"):
        assert await refresher.refresh()
    first = book.get(AGENT)
    assert first is not None and (first.threshold, first.target, first.learned_at) == (
        63,
        0.1,
        42.0,
    )
    assert "alert threshold 63 (was the default)" in caplog.text
    source.fail = ConnectionError("redis down")
    assert not await refresher.refresh()
    assert book.get(AGENT) is first and refresher.failures == 1  # kept as it was
    source.fail = None
    source.value = tally_of(AGENT, {80: 5}, {20: 10})  # outcomes expired below the minimum
    assert await refresher.refresh()
    assert book.get(AGENT) is None and len(book) == 0
