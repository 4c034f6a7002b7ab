"""Live agreement figures for /metrics: the tally (merged over every process) read at most every
`interval_s`, never per scrape, by a task off the event loop's hot path; a scrape reads the
families made at the last refresh.

Labels are bounded: `agent` is one of the TOP_AGENTS agents with most outcomes, or "other";
`view` is rules, judge, blend or final; `check` is a team check that failed runs with outcomes
(the checks a team configures: a few). Every worker serves the same figures (they come from
one tally): aggregate them with max(), never sum().
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from prometheus_client.core import Metric

from tracejudge.judges.agreement.action_effects import ActionFigures, SteerFigures
from tracejudge.judges.agreement.rule_rates import RuleRate
from tracejudge.judges.agreement.tally import Figures, Tally, views_of
from tracejudge.settings import Settings
from tracejudge.streams.agreement import actions
from tracejudge.streams.agreement.gauges import gauge_families
from tracejudge.streams.agreement.store import RedisAgreementStore, keys_of

log = logging.getLogger(__name__)

TOP_AGENTS = 20
OTHER = "other"
VIEWS = ("rules", "judge", "blend", "final")
REFRESH_S = 30.0


def agreement_store(settings: Settings, redis: aioredis.Redis | None) -> RedisAgreementStore | None:
    """The process's store: None without Redis (no live agreement; said at start)."""
    if redis is None:
        return None
    return RedisAgreementStore(
        redis, settings.agreement_retention_s, prefix=keys_of(settings.topic_prefix)
    )


def bounded(tally: Tally, top: int = TOP_AGENTS) -> Tally:
    """The tally with the agents past the `top` with most outcomes counted as "other"."""
    runs: Counter[str] = Counter()
    for cell, n in tally.counts.items():
        if cell.view == "rules":  # every pair has one rules cell: one a run and source
            runs[cell.agent] += n
    kept = {agent for agent, _ in runs.most_common(top)}
    out = Tally()
    for cell, n in tally.counts.items():
        out.counts[cell if cell.agent in kept else cell._replace(agent=OTHER)] += n
    for cell, n in tally.run_counts.items():
        out.run_counts[cell if cell.agent in kept else cell._replace(agent=OTHER)] += n
    return out


def by_agent(tally: Tally) -> dict[tuple[str, str], Figures]:
    """(agent, view) -> figures, for every agent and view with runs."""
    found: dict[tuple[str, str], Figures] = {}
    dimensions = views_of(tally)  # a team's own dimensions: a view each, beside the sources
    for agent in tally.agents():
        for view in (*VIEWS, *dimensions):
            figures = tally.figures(view, agent=agent)
            if figures.runs:
                found[(agent, view)] = figures
    return found


SERIES: tuple[tuple[str, str, Callable[[Figures], float | None]], ...] = (
    # labels: a run labelled by two outcome sources is counted once for each
    ("runs", "Outcome labels: runs with an outcome, once per outcome source.", lambda f: f.runs),
    ("ok_runs", "Runs whose outcome was ok.", lambda f: f.ok_runs),
    ("failed_runs", "Runs whose outcome was failed.", lambda f: f.failed_runs),
    ("auc", "AUC of the score against the outcome (0.5: chance).", lambda f: f.auc),
    ("auc_low", "Low end of the AUC's 95 % interval.", lambda f: _end(f.auc_interval, 0)),
    ("auc_high", "High end of the AUC's 95 % interval.", lambda f: _end(f.auc_interval, 1)),
    ("ok_alerted", "Share of ok runs with a low_score alert.", lambda f: f.ok_alerted.value),
    (
        "failed_flagged",
        "Share of failed runs flagged (not passed, not success, or incomplete).",
        lambda f: f.failed_flagged.value,
    ),
    (
        "alert_precision",
        "Share of alerted runs whose outcome was failed.",
        lambda f: f.alert_precision.value,
    ),
)


# a team's checks against outcomes, per agent and check (`Tally.check_rates`)
CHECK_SERIES: tuple[tuple[str, str, Callable[[RuleRate], float | None]], ...] = (
    ("fired", "Runs with an outcome the check failed (once a source).", lambda r: r.fired),
    ("on_ok", "Share of the ok runs the check failed.", lambda r: r.on_ok.value),
    ("on_failed", "Share of the failed runs the check failed.", lambda r: r.on_failed.value),
    (
        "precision",
        "Share of the runs the check failed whose outcome was failed.",
        lambda r: r.precision.value,
    ),
)


def check_figures(tally: Tally) -> dict[tuple[str, str], RuleRate]:
    """(agent, check:<name>) -> its rates, for every agent with a check that fired."""
    return {(agent, r.rule): r for agent in tally.agents() for r in tally.check_rates(agent)}


def _end(interval: tuple[float, float] | None, i: int) -> float | None:
    return None if interval is None else interval[i]


def families(
    figures: dict[tuple[str, str], Figures],
    checks: dict[tuple[str, str], RuleRate] | None = None,
) -> list[Metric]:
    return gauge_families(
        "tracejudge_agreement_",
        "Per agent and verdict source (view), over the agreement retention; the same on every "
        "worker: aggregate with max().",
        "view",
        SERIES,
        figures,
    ) + gauge_families(
        "tracejudge_agreement_check_",
        "Per agent and team check, over the agreement retention; the same on every worker: "
        "aggregate with max().",
        "check",
        CHECK_SERIES,
        checks or {},
    )


@dataclass
class LiveAgreement:
    store: RedisAgreementStore
    interval_s: float = REFRESH_S
    clock: Callable[[], float] = time.monotonic
    figures: dict[tuple[str, str], Figures] = field(default_factory=dict)
    tally: Tally | None = None  # as of the last refresh that read it
    # the effect of actions: (agent, action) -> figures, served beside agreement's
    actions: dict[tuple[str, str], ActionFigures] = field(default_factory=dict)
    # a team's checks against outcomes: (agent, check:<name>) -> rates
    checks: dict[tuple[str, str], RuleRate] = field(default_factory=dict)
    # what came of the steers: (agent, loop rule) -> figures
    steers: dict[tuple[str, str], SteerFigures] = field(default_factory=dict)
    failures: int = 0
    _families: list[Metric] = field(default_factory=list)
    _read_at: float | None = None

    async def refresh(self) -> bool:
        try:
            tally = await self.store.tally()
            acted = await self.store.action_tally()
        except Exception as exc:  # the figures of the last read stay
            self.failures += 1
            log.warning("agreement figures not refreshed (%d failures): %r", self.failures, exc)
            return False
        self.tally = tally
        kept = bounded(tally)
        self.figures = by_agent(kept)
        self.checks = check_figures(kept)
        acted = actions.bounded(acted, TOP_AGENTS, OTHER)
        self.actions, self.steers = acted.figures(), acted.steer_figures()
        self._families = families(self.figures, self.checks) + actions.families(
            self.actions, self.steers
        )
        self._read_at = self.clock()
        return True

    async def run(self) -> None:
        """Refresh now, then every `interval_s`, until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval_s)

    def metrics(self) -> list[Metric]:
        """What a scrape shows: the families of the last refresh (nothing before the first)."""
        return self._families
