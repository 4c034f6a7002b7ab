"""Each agent's alert threshold in use, said where people look: `tracejudge status`, the
explorer's agent page and /metrics.

An agent's verdicts are held to its calibration's threshold once its outcomes reach the minimums
(`judges/agreement/calibration.py`), else to TRACEJUDGE_WARN_THRESHOLD. /metrics reads the
process's own calibration book, the one its verdicts use. Status and the explorer have no book:
they learn the calibrations from the same shared tally by the same rule
(`thresholds_in_use`), which is what every worker and judge process holds within
TRACEJUDGE_CALIBRATION_REFRESH_S of the read (their refreshers read that tally too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracejudge.judges.agreement.calibration import Calibration, CalibrationBook, calibrate_all
from tracejudge.judges.agreement.tally import Tally
from tracejudge.settings import Settings
from tracejudge.streams.shared.metrics import MAX_AGENT_LABELS, AgentMetrics, AgentThreshold

CALIBRATED = "calibrated"
CONFIGURED = "configured"


@dataclass(frozen=True)
class ThresholdInUse:
    """An agent's threshold now, and the outcomes counted for it (its final verdicts'; for a
    calibration, the ones it was learned from)."""

    agent: str
    threshold: int
    calibration: Calibration | None
    ok_runs: int
    failed_runs: int

    @property
    def source(self) -> str:
        return CALIBRATED if self.calibration is not None else CONFIGURED

    @property
    def outcomes(self) -> int:
        return self.ok_runs + self.failed_runs

    def as_dict(self) -> dict[str, Any]:
        c = self.calibration
        return {
            "threshold": self.threshold,
            "source": self.source,
            "outcomes": self.outcomes,
            "ok_runs": self.ok_runs,
            "failed_runs": self.failed_runs,
            "calibration_id": None if c is None else c.id,
            "target": None if c is None else c.target,
        }


def thresholds_in_use(tally: Tally, settings: Settings, at: float) -> list[ThresholdInUse]:
    """The threshold of every agent with outcomes in the tally, calibrated by the settings'
    rule (none with the calibration off)."""
    learned: dict[str, Calibration] = {}
    if settings.calibration_enabled:
        learned = {c.agent: c for c in calibrate_all(tally, settings.calibration_rule(), at)}
    found = []
    for agent in tally.agents():
        final = tally.figures("final", agent=agent)
        if not final.runs:
            continue
        c = learned.get(agent)
        if c is not None:  # the runs it was learned from (the same count, by the same rule)
            found.append(ThresholdInUse(agent, c.threshold, c, c.ok_runs, c.failed_runs))
        else:
            threshold = settings.warn_threshold
            found.append(ThresholdInUse(agent, threshold, None, final.ok_runs, final.failed_runs))
    return found


def threshold_of(tally: Tally, settings: Settings, agent: str, at: float) -> ThresholdInUse:
    """One agent's threshold (the configured one when it has no outcomes)."""
    for found in thresholds_in_use(tally, settings, at):
        if found.agent == agent:
            return found
    return ThresholdInUse(agent, settings.warn_threshold, None, 0, 0)


def rule_json(settings: Settings) -> dict[str, Any]:
    """What decides whether and when an agent's threshold is calibrated."""
    return {
        "configured": settings.warn_threshold,
        "calibration_enabled": settings.calibration_enabled,
        "min_ok_runs": settings.calibration_min_ok_runs,
        "min_failed_runs": settings.calibration_min_failed_runs,
        "refresh_s": settings.calibration_refresh_s,
    }


def thresholds_json(tally: Tally, settings: Settings, at: float) -> dict[str, Any]:
    """What `tracejudge status --json` shows under "thresholds": the rule, and per agent with
    outcomes its threshold (`ThresholdInUse.as_dict`)."""
    found = thresholds_in_use(tally, settings, at)
    return {**rule_json(settings), "agents": {t.agent: t.as_dict() for t in found}}


def threshold_words(entry: dict[str, Any], rule: dict[str, Any]) -> str:
    """One agent's threshold (`ThresholdInUse.as_dict`) in words, under `rule` (`rule_json`)."""
    ok, failed = entry["ok_runs"], entry["failed_runs"]
    outcomes = f"{ok + failed} outcomes ({ok} ok, {failed} failed)"
    if entry["source"] == CALIBRATED:
        return (
            f"{entry['threshold']}, calibrated from {outcomes} to alert at most "
            f"{entry['target'] * 100:g} % of its ok runs (calibration {entry['calibration_id']})"
        )
    so_far = f"{ok + failed} so far: {ok} ok, {failed} failed"
    if not rule["calibration_enabled"]:
        return f"{entry['threshold']}, configured (calibration off; outcomes {so_far})"
    need = f"{rule['min_ok_runs']} ok and {rule['min_failed_runs']} failed outcomes"
    return f"{entry['threshold']}, configured (calibrated once it has {need}; {so_far})"


def threshold_lines(found: dict[str, Any] | None, configured: int, why: str | None) -> list[str]:
    """The status section (`thresholds_json`, None when no tally could be read): a line per
    agent with outcomes, then what the others get."""
    if found is None and why is not None and not why.startswith("off"):
        # Redis is there, but did not answer: the workers may well hold calibrations
        return [f"  unknown ({why}); the configured threshold is {configured}"]
    if found is None:  # no Redis: no outcomes, nothing is calibrated anywhere
        return [f"  every agent: {configured}, configured ({why or 'no outcomes read'})"]
    lines = [f"  {agent}: {threshold_words(e, found)}" for agent, e in found["agents"].items()]
    lines.append(f"  agents without outcomes: {configured}, configured")
    if found["calibration_enabled"]:
        lines.append(
            "  (learned here from the shared outcome tally by the workers' rule: every worker "
            f"and judge process holds the same within {found['refresh_s']:g} s)"
        )
    return lines


def _label(agent: str) -> str:
    # the tally and /metrics name a run without an agent name alike (models/agents.py)
    return agent


def alert_thresholds(
    book: CalibrationBook, settings: Settings, agents: AgentMetrics
) -> list[AgentThreshold]:
    """What /metrics shows, read from the process's book at each scrape: each calibrated
    agent's threshold (those with most outcomes first), then the configured one of each other
    agent this process has a label for, MAX_AGENT_LABELS agents in all (a calibrated agent past
    them is left out: a threshold cannot be summed into "(other)")."""
    calibrated = book.by_agent.values() if settings.calibration_enabled else ()
    by_outcomes = sorted(calibrated, key=lambda c: (-(c.ok_runs + c.failed_runs), c.agent))
    rows = [
        AgentThreshold(_label(c.agent), CALIBRATED, c.threshold, c.ok_runs + c.failed_runs)
        for c in by_outcomes[:MAX_AGENT_LABELS]
    ]
    named = {row.agent for row in rows}
    for agent in agents.labelled():
        if len(rows) >= MAX_AGENT_LABELS:
            break
        if agent not in named:
            rows.append(AgentThreshold(agent, CONFIGURED, settings.warn_threshold, 0))
    return rows
