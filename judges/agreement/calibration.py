"""Calibrated alerts: per agent, the alert threshold its own outcomes say holds a target share
of its ok runs alerted. Pure: from a `Tally` to `Calibration`s.

The rule. Scores are integers, so an agent's ok runs are a histogram; a run is alerted when
its score is below the threshold. The threshold is the largest integer t with

    (ok runs scoring below t + 1) / (ok runs + 1) <= target

which is the split-conformal quantile: for a new ok run exchangeable with the ones counted,
the chance that it scores below t is at most the target. The plain empirical rule (largest t
with share(score < t | ok) <= target) sits on the next ok score up, and held out alerts about
(k + 1) / (n + 1) of ok runs where k = target * n: 7 % instead of 5 % with 40 ok runs. The "+1"
costs nothing with many outcomes and keeps the promise with few.

Ties: a threshold cannot cut between ok runs of the same score; it stays below the tie when
alerting all of it would pass the target (so the held-out share can be under the target,
never over by construction). Small samples: with fewer than 1/target - 1 ok runs no threshold
inside the ok scores keeps the promise, and there is no calibration (alerting nothing is not a
calibration); above that, the settings' minimums decide (`CalibrationRule`).

Only the "final" view counts (what was published: the blend where the LLM judge answered, the
rules elsewhere): that is the score the threshold is tested on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tracejudge.judges.agreement.tally import Cell, Tally
from tracejudge.models.agents import NO_AGENT
from tracejudge.models.ids import stable_id
from tracejudge.models.outputs import CalibrationUsed

__all__ = [
    "Calibration",
    "CalibrationBook",
    "CalibrationRule",
    "calibrate",
    "calibrate_all",
    "conformal_threshold",
]


@dataclass(frozen=True)
class CalibrationRule:
    """When and to what an agent's threshold is calibrated (from settings)."""

    target: float = 0.05  # the share of ok runs alerted it aims at, at most
    min_ok_runs: int = 30
    min_failed_runs: int = 10

    def __post_init__(self) -> None:
        if not 0 < self.target < 1:
            raise ValueError(f"calibration target {self.target} must be between 0 and 1")
        if self.min_ok_runs < 1 or self.min_failed_runs < 1:
            # both kinds present: a stream of only ok outcomes (thumbs-up only) is not labels
            raise ValueError("calibration minimums must be at least 1 ok and 1 failed run")


@dataclass(frozen=True)
class Calibration:
    """An agent's alert threshold, learned from the outcomes of its runs."""

    id: str
    agent: str
    threshold: int
    target: float
    ok_runs: int
    failed_runs: int
    learned_at: float

    @classmethod
    def of(
        cls, agent: str, threshold: int, target: float, ok_runs: int, failed_runs: int, at: float
    ) -> Calibration:
        # deterministic: the same outcomes give the same id in every process and every minute
        # they do not change; learned_at is left out so a refresh that learns nothing new keeps it
        parts = (str(threshold), repr(target), str(ok_runs), str(failed_runs))
        digest = stable_id("calibration", agent, *parts)
        return cls(f"c-{digest[:12]}", agent, threshold, target, ok_runs, failed_runs, at)

    def used(self) -> CalibrationUsed:
        """What an evaluation it made says of it."""
        return CalibrationUsed.model_validate(self, from_attributes=True)

    def words(self) -> str:
        """The reasons line of an evaluation it made."""
        runs = self.ok_runs + self.failed_runs
        return (
            f"alert threshold {self.threshold}, calibrated for agent {self.agent} from {runs} "
            f"outcomes ({self.ok_runs} ok, {self.failed_runs} failed) to alert at most "
            f"{self.target * 100:g} % of its ok runs (calibration {self.id})"
        )


def conformal_threshold(ok_scores: Mapping[int, int], target: float) -> int | None:
    """The largest integer t with (ok runs below t + 1) / (ok runs + 1) <= target, among the
    ok scores (a histogram score -> runs); None when none qualifies (too few ok runs)."""
    n = sum(v for v in ok_scores.values() if v > 0)
    best: int | None = None
    below = 0
    for score in sorted(s for s, v in ok_scores.items() if v > 0):
        if (below + 1) / (n + 1) > target:
            break
        best = score  # alerting every ok run below this score still keeps the target
        below += ok_scores[score]
    return best


def _final(cell: Cell) -> bool:
    return cell.view == ("blend" if cell.judged else "rules")


def calibrate(
    agent: str, ok_scores: Mapping[int, int], failed_runs: int, rule: CalibrationRule, at: float
) -> Calibration | None:
    ok_runs = sum(ok_scores.values())
    if ok_runs < rule.min_ok_runs or failed_runs < rule.min_failed_runs:
        return None
    threshold = conformal_threshold(ok_scores, rule.target)
    if threshold is None:
        return None
    return Calibration.of(agent, min(100, threshold), rule.target, ok_runs, failed_runs, at)


def calibrate_all(tally: Tally, rule: CalibrationRule, at: float) -> list[Calibration]:
    """A calibration for each agent of the tally past the minimums."""
    ok: dict[str, Counter[int]] = {}
    failed: Counter[str] = Counter()
    for cell, n in tally.counts.items():
        if n <= 0 or not _final(cell):
            continue
        if cell.ok:
            ok.setdefault(cell.agent, Counter())[cell.score] += n
        else:
            failed[cell.agent] += n
    found = (calibrate(a, ok.get(a, Counter()), failed[a], rule, at) for a in tally.agents())
    return [c for c in found if c is not None]


@dataclass
class CalibrationBook:
    """The calibrations in force, by agent; refreshed while the process runs.

    Mutable on purpose inside the frozen `Policy`: the policy is built once from settings and
    shared by the closer and the judge stage, while calibrations are learned from outcomes
    every minute. `replace` swaps the whole mapping in one assignment, so a verdict (made on
    the event loop, between awaits) reads either the old book or the new one, never a mix."""

    by_agent: dict[str, Calibration] = field(default_factory=dict)

    def get(self, agent_name: str | None) -> Calibration | None:
        # the tally files a run without an agent name under NO_AGENT: read it the same way
        return self.by_agent.get(agent_name or NO_AGENT)

    def replace(self, calibrations: Iterable[Calibration]) -> None:
        self.by_agent = {c.agent: c for c in calibrations}

    def __len__(self) -> int:
        return len(self.by_agent)
