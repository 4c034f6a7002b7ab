"""How verdicts agree with ground truth: pure arithmetic shared by the live worker (outcomes
joined to verdicts), `tracejudge agreement`, `tracejudge replay --labels` and the benchmarks.

What a final verdict leaves for its outcome is a `Kept` (a few dozen bytes: the scores and
flags of each verdict source, agent, version, threshold, findings). An outcome meets it as a
`Truth`; the pair adds one `Cell` per verdict source to a `Tally`, a count of cells. Every
figure (AUC, ok runs alerted, failed runs flagged, alert precision, calibration) is computed
from a tally, so the live worker, the offline command and a replay give the same figures
from the same pairs, and a pair counted twice is a cell counted twice: the store makes each
pair count once (replacing, never adding, when the same outcome comes again).

Scores are integers 0-100, so a histogram per class gives the AUC exactly (ties count half).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from tracejudge.models.agents import NO_AGENT

if TYPE_CHECKING:
    from tracejudge.judges.agreement.rule_rates import RuleRate
    from tracejudge.judges.rules.judge import RuleVerdict
    from tracejudge.models.outputs import Evaluation

VerdictSource = Literal["rules", "judge", "blend"]
VERDICT_SOURCES: tuple[VerdictSource, ...] = ("rules", "judge", "blend")
Z95 = 1.959964  # the normal quantile of a two-sided 95 % interval
CALIBRATION_BINS = 10  # score bins of the reliability plot: 0-9, 10-19, ..., 90-100
FINDINGS_CHARS = 48  # findings no bit below names, kept by name, joined, at most this long
# Findings kept as bits of one number (a request keeps < 128 bytes): APPEND ONLY, a
# kept verdict is read back by position. A finding not listed is kept by name.
KNOWN_FINDINGS = (
    "unrecovered_failure",
    "last_attempt_failed",
    "stopped_at_limit",
    "says_work_remains",
    "confirmed_not_done",
    "pending_action",
    "planned_step_not_attempted",
    "placeholder_answer",
    "generic_answer",
    "no_final_response",
    "claim_without_call",
    "change_without_go_ahead",
    "patch_adds_only",
    "identical_call_loop",
    "compound_trouble",
    "failures_for_agent",
    "changes_for_agent",
    "long_for_agent",
    "slow_for_agent",
)
_FINDING_BIT = {name: 1 << i for i, name in enumerate(KNOWN_FINDINGS)}
# A team's check that failed a run is a finding `check:<name>`, kept whole (not cut to
# FINDINGS_CHARS: its outcome is counted for it, `Tally.check_rates`), a few per run
CHECK_PREFIX = "check:"
CHECKS_KEPT = 6
# A run's failure mode (Evaluation.mode's key) is kept too: its outcome is counted for the mode
# (`Tally.mode_rates`), so a mode that is mostly false alarms shows as such
MODE_PREFIX = "mode:"


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


# -- what a verdict leaves, what an outcome says ----------------------------------------------


@dataclass(frozen=True)
class View:
    """One verdict source's reading of a request."""

    score: int  # 0-100
    alerted: bool  # below the threshold in force: not passed (a low_score alert)
    flagged: bool  # alerted, or not success, or incomplete, as this source decided

    @classmethod
    def of(cls, score: float, threshold: int, success: bool, incomplete: bool) -> View:
        alerted = score < threshold  # on the unrounded score, as `passed` is decided
        return cls(round(score), alerted, alerted or not success or incomplete)


@dataclass(frozen=True)
class Kept:
    """What a final verdict keeps for its outcome to meet (`encode`: a compact JSON list)."""

    agent: str | None
    version: str | None
    threshold: int
    rules: View
    judge: View | None = None  # the LLM judge's own reading, when it answered
    blend: View | None = None  # the published verdict, when the judge answered
    findings: tuple[str, ...] = ()
    calibration: str | None = None  # the id of the calibration that set the threshold
    ts: float = 0.0
    # what a follow-up's evaluation says of its origin: the published score and
    # verdicts, the round, and the chain's first request when it is not this one. None in a
    # record kept by a worker older than these
    score: int | None = None
    success: bool | None = None
    incomplete: bool | None = None
    round: int = 0
    root: str | None = None
    # the rule of each steer the run was sent (action_effects.steer_outcomes), in order
    steered: tuple[str, ...] = ()
    # the team's own dimensions the judge scored: (name, score, below its threshold)
    dimensions: tuple[tuple[str, int, bool], ...] = ()
    mode: str | None = None  # its failure mode's key (None: a clean pass, or an older worker)

    @property
    def judged(self) -> bool:
        return self.blend is not None

    def views(self) -> dict[VerdictSource, View]:
        found: dict[VerdictSource, View] = {"rules": self.rules}
        if self.judge is not None:
            found["judge"] = self.judge
        if self.blend is not None:
            found["blend"] = self.blend
        return found

    def encode(self) -> str:
        """A JSON list: agent, version, threshold, each view as one number (score × 4 + its
        two flags), the findings as bits of KNOWN_FINDINGS and by name, calibration, time in
        whole seconds; last, only for a steered run, the rule of each steer. About 60–110
        bytes."""

        def v(view: View | None) -> int | None:
            if view is None:
                return None
            return view.score * 4 + int(view.alerted) + 2 * int(view.flagged)

        bits = 0
        others = []
        checks = []
        for name in self.findings:
            bit = _FINDING_BIT.get(name)
            if name.startswith(CHECK_PREFIX):
                checks.append(name)
            elif bit is None:
                others.append(name)
            else:
                bits |= bit
        named = [",".join(others)[:FINDINGS_CHARS], *checks[:CHECKS_KEPT]]
        row: list[object] = [
            self.agent,
            self.version,
            self.threshold,
            v(self.rules),
            v(self.judge),
            v(self.blend),
            bits,
            ",".join(n for n in named if n),
            self.calibration,
            round(self.ts),
            # the published verdict as one number: score × 4 + success + 2 × incomplete
            None
            if self.score is None
            else self.score * 4 + int(bool(self.success)) + 2 * int(bool(self.incomplete)),
            self.round,
            self.root,
        ]
        if self.steered or self.dimensions or self.mode:  # only then: others keep what they did
            row.append(list(self.steered))
        if self.dimensions or self.mode:  # by position after the steers: [name, score × 2 + below]
            row.append([[name, score * 2 + int(low)] for name, score, low in self.dimensions])
        if self.mode:  # after the dimensions
            row.append(self.mode)
        return json.dumps(row, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, text: str | bytes) -> Kept:
        row = json.loads(text)
        agent, version, threshold, rules, judge, blend, bits, others, calibration, ts = row[:10]
        # a record kept by an older worker has the first ten only
        state, round_, root = row[10:13] if len(row) >= 13 else (None, 0, None)
        steered = tuple(str(r) for r in row[13]) if len(row) >= 14 else ()
        scored = row[14] if len(row) >= 15 else []
        dimensions = tuple((str(name), int(n) // 2, bool(int(n) & 1)) for name, n in scored)
        mode = str(row[15]) if len(row) >= 16 and row[15] else None

        def v(n: int | None) -> View | None:
            if n is None:
                return None
            return View(int(n) // 4, bool(n & 1), bool(n & 2))

        kept_rules = v(rules)
        assert kept_rules is not None
        named = tuple(name for name in KNOWN_FINDINGS if bits & _FINDING_BIT[name])
        return cls(
            agent,
            version,
            int(threshold),
            kept_rules,
            v(judge),
            v(blend),
            named + tuple(f for f in others.split(",") if f),
            calibration,
            float(ts),
            None if state is None else int(state) // 4,
            None if state is None else bool(state & 1),
            None if state is None else bool(state & 2),
            int(round_ or 0),
            root,
            steered,
            dimensions,
            mode,
        )


def kept_of(
    evaluation: Evaluation, rules: RuleVerdict | None = None, low: frozenset[str] = frozenset()
) -> Kept:
    """What a final evaluation keeps. `rules`: the rules' own verdict, when the judge's may
    have replaced it (a judged request); without it the evaluation is the rules' own. `low`:
    the team's dimensions it alerted on (scored below their thresholds)."""
    e = evaluation
    threshold = e.warn_threshold
    if rules is None:
        rules_view = View(e.rule_score, not e.passed, not e.passed or not e.success or e.incomplete)
    else:
        exact = rules.rule_score if rules.rule_exact is None else rules.rule_exact
        rules_view = View.of(exact, threshold, rules.success, rules.incomplete)
    judge = blend = None
    if e.judge_status == "ok" and e.llm_score is not None:
        judge = View.of(e.llm_score, threshold, e.success, e.incomplete)
        flagged = not e.passed or not e.success or e.incomplete
        blend = View(e.overall_score, not e.passed, flagged)
    calibration = getattr(e, "calibration", None)
    return Kept(
        agent=e.agent_name,
        version=e.agent_version,
        threshold=threshold,
        rules=rules_view,
        judge=judge,
        blend=blend,
        findings=tuple(dict.fromkeys(f.rule for f in e.findings)),
        calibration=getattr(calibration, "id", None),
        ts=e.ts,
        score=e.overall_score,
        success=e.success,
        incomplete=e.incomplete,
        round=e.reflection_round,
        root=None if e.origin is None else e.origin.root_request_id,
        steered=tuple(
            m.crossed
            for m in e.interventions
            if m.action == "steer" and m.kind == "loop" and m.read is not False
        ),
        dimensions=tuple(
            (name, score, name in low)
            for name, score in sorted((e.dimension_scores.criteria or {}).items())
        )
        if e.judge_status == "ok"
        else (),
        mode=None if e.mode is None else e.mode.key,
    )


@dataclass(frozen=True)
class Truth:
    """An outcome as it is counted: ok or not, from a source (human, test, reward, user...)."""

    ok: bool
    source: str


class Cell(NamedTuple):
    """What one (verdict, outcome) pair counts, per verdict source."""

    agent: str
    version: str
    view: str  # a VerdictSource
    source: str  # the outcome's
    judged: bool  # the judge answered for this request (compare sources on the same runs)
    ok: bool
    score: int
    alerted: bool
    flagged: bool

    def key(self) -> str:
        """A flat string, as a Redis hash field or a JSON object key."""
        return "\x1f".join(
            (
                self.agent,
                self.version,
                self.view,
                self.source,
                str(int(self.judged)),
                str(int(self.ok)),
                str(self.score),
                str(int(self.alerted)),
                str(int(self.flagged)),
            )
        )

    @classmethod
    def of_key(cls, key: str) -> Cell:
        agent, version, view, source, judged, ok, score, alerted, flagged = key.split("\x1f")
        return cls(
            agent,
            version,
            view,
            source,
            judged == "1",
            ok == "1",
            int(score),
            alerted == "1",
            flagged == "1",
        )


NO_VERSION = ""
# A run cell counts a request with outcomes once, whatever number of outcome sources labelled
# it (its pairs count once per source): `Tally.runs`. Kept beside the pairs' cells, in the same
# buckets, and in no figure.
RUN_VIEW = "run"


def cells(kept: Kept, truth: Truth) -> list[Cell]:
    """The cells one pair counts: one per verdict source the request has, and one per team
    check that failed it."""
    agent = kept.agent or NO_AGENT
    version = kept.version or NO_VERSION
    return (
        check_cells(kept, truth)
        + dimension_cells(kept, truth)
        + mode_cells(kept, truth)
        + [
            Cell(
                agent,
                version,
                name,
                truth.source,
                kept.judged,
                truth.ok,
                view.score,
                view.alerted,
                view.flagged,
            )
            for name, view in kept.views().items()
        ]
    )


# A team's own dimension, as a view of its own: its score against the outcome, its alerts
DIMENSION_PREFIX = "dimension:"


def dimension_cells(kept: Kept, truth: Truth) -> list[Cell]:
    """One cell per team dimension the judge scored (view `dimension:<name>`): its figures
    (AUC, ok runs alerted, alert precision) are a verdict source's, per agent."""
    agent = kept.agent or NO_AGENT
    version = kept.version or NO_VERSION
    return [
        Cell(agent, version, DIMENSION_PREFIX + name, truth.source, True, truth.ok, score, low, low)
        for name, score, low in kept.dimensions
    ]


def views_of(tally: Tally) -> list[str]:
    """The team dimensions' views present in a tally, sorted."""
    return sorted({c.view for c in tally.counts if c.view.startswith(DIMENSION_PREFIX)})


def check_cells(kept: Kept, truth: Truth) -> list[Cell]:
    """One cell per team check that failed the run (view: the finding, `check:<name>`), for
    its rates on ok and failed runs (`Tally.check_rates`)."""
    agent = kept.agent or NO_AGENT
    version = kept.version or NO_VERSION
    return [
        Cell(agent, version, name, truth.source, kept.judged, truth.ok, 0, False, False)
        for name in kept.findings
        if name.startswith(CHECK_PREFIX)
    ]


def mode_cells(kept: Kept, truth: Truth) -> list[Cell]:
    """One cell for the run's failure mode (view: `mode:<key>`), for the share of its runs
    that truly failed (`Tally.mode_rates`)."""
    if not kept.mode:
        return []
    agent, version = kept.agent or NO_AGENT, kept.version or NO_VERSION
    view = MODE_PREFIX + kept.mode
    return [Cell(agent, version, view, truth.source, kept.judged, truth.ok, 0, False, False)]


def run_cell(kept: Kept) -> Cell:
    """What a request with outcomes counts as a run, once for all its outcome sources."""
    agent, version = kept.agent or NO_AGENT, kept.version or NO_VERSION
    return Cell(agent, version, RUN_VIEW, "", kept.judged, False, 0, False, False)


# -- figures -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    """A proportion with its count and Wilson 95 % interval (None without a count)."""

    hits: int
    count: int

    @property
    def value(self) -> float | None:
        return self.hits / self.count if self.count else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson(self.hits, self.count)


def wilson(hits: int, count: int, z: float = Z95) -> tuple[float, float] | None:
    if count <= 0:
        return None
    p = hits / count
    denominator = 1 + z * z / count
    centre = (p + z * z / (2 * count)) / denominator
    half = z * math.sqrt(p * (1 - p) / count + z * z / (4 * count * count)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def auc_of_histograms(ok: Mapping[int, int], failed: Mapping[int, int]) -> float | None:
    """The AUC from counts per integer score of ok and failed runs: exact, ties count half."""
    n_ok, n_failed = sum(ok.values()), sum(failed.values())
    if not n_ok or not n_failed:
        return None
    below = 0  # failed runs scoring below the current score
    wins = 0.0
    for score in sorted(set(ok) | set(failed)):
        here = failed.get(score, 0)
        wins += ok.get(score, 0) * (below + 0.5 * here)
        below += here
    return wins / (n_ok * n_failed)


def auc_interval(value: float, n_ok: int, n_failed: int) -> tuple[float, float]:
    """Hanley & McNeil's (1982) 95 % interval of an AUC."""
    q1 = value / (2 - value)
    q2 = 2 * value * value / (1 + value)
    variance = (
        value * (1 - value) + (n_ok - 1) * (q1 - value**2) + (n_failed - 1) * (q2 - value**2)
    ) / (n_ok * n_failed)
    half = Z95 * math.sqrt(max(0.0, variance))
    return max(0.0, value - half), min(1.0, value + half)


@dataclass(frozen=True)
class Bin:
    """One score bin of the reliability plot: its runs, how many were ok, their mean score."""

    low: int
    high: int
    runs: int
    ok: int
    mean_score: float | None

    @property
    def ok_share(self) -> Share:
        return Share(self.ok, self.runs)


@dataclass(frozen=True)
class Figures:
    """How one verdict source agreed with the outcomes of one set of runs."""

    runs: int
    ok_runs: int
    failed_runs: int
    auc: float | None
    auc_interval: tuple[float, float] | None
    ok_alerted: Share  # ok runs with a low_score alert
    failed_flagged: Share  # failed runs not passed, not success, or incomplete
    alert_precision: Share  # of alerted runs, how many failed
    calibration: tuple[Bin, ...]

    def as_dict(self) -> dict[str, Any]:
        def share(s: Share) -> dict[str, Any]:
            return {"value": s.value, "count": s.count, "hits": s.hits, "interval": s.interval}

        return {
            "runs": self.runs,
            "ok_runs": self.ok_runs,
            "failed_runs": self.failed_runs,
            "auc": self.auc,
            "auc_interval": self.auc_interval,
            "ok_alerted": share(self.ok_alerted),
            "failed_flagged": share(self.failed_flagged),
            "alert_precision": share(self.alert_precision),
            "calibration": [
                {
                    "low": b.low,
                    "high": b.high,
                    "runs": b.runs,
                    "ok": b.ok,
                    "mean_score": b.mean_score,
                    "ok_interval": b.ok_share.interval,
                }
                for b in self.calibration
            ],
        }


def figures_of(counted: Iterable[tuple[Cell, int]]) -> Figures:
    """The figures of the given cells (already chosen: one verdict source, one agent...)."""
    ok_hist: Counter[int] = Counter()
    failed_hist: Counter[int] = Counter()
    ok_alerted = failed_flagged = alerted = alerted_failed = 0
    bins = [[0, 0, 0] for _ in range(CALIBRATION_BINS)]  # runs, ok, score sum
    for cell, n in counted:
        if n <= 0:
            continue
        (ok_hist if cell.ok else failed_hist)[cell.score] += n
        if cell.alerted:
            alerted += n
            ok_alerted += n if cell.ok else 0
            alerted_failed += 0 if cell.ok else n
        if cell.flagged and not cell.ok:
            failed_flagged += n
        b = bins[min(CALIBRATION_BINS - 1, cell.score * CALIBRATION_BINS // 100)]
        b[0] += n
        b[1] += n if cell.ok else 0
        b[2] += n * cell.score
    n_ok, n_failed = sum(ok_hist.values()), sum(failed_hist.values())
    value = auc_of_histograms(ok_hist, failed_hist)
    width = 100 // CALIBRATION_BINS
    return Figures(
        runs=n_ok + n_failed,
        ok_runs=n_ok,
        failed_runs=n_failed,
        auc=value,
        auc_interval=None if value is None else auc_interval(value, n_ok, n_failed),
        ok_alerted=Share(ok_alerted, n_ok),
        failed_flagged=Share(failed_flagged, n_failed),
        alert_precision=Share(alerted_failed, alerted),
        calibration=tuple(
            Bin(
                i * width,
                100 if i == CALIBRATION_BINS - 1 else (i + 1) * width - 1,
                runs,
                ok,
                total / runs if runs else None,
            )
            for i, (runs, ok, total) in enumerate(bins)
        ),
    )


@dataclass
class Tally:
    """Counts of cells: the whole state agreement figures are computed from. `counts`: the
    pairs' cells (a request with outcomes from two sources has two pairs); `run_counts`: the
    run cells (`run_cell`), one per request with outcomes."""

    counts: Counter[Cell] = field(default_factory=Counter)
    run_counts: Counter[Cell] = field(default_factory=Counter)

    def add(self, pair: Iterable[Cell], times: int = 1) -> None:
        for cell in pair:
            into = self.run_counts if cell.view == RUN_VIEW else self.counts
            into[cell] += times
            if into[cell] == 0:
                del into[cell]

    def merge(self, other: Tally) -> None:
        for cell, n in other.counts.items():
            self.counts[cell] += n
        for cell, n in other.run_counts.items():
            self.run_counts[cell] += n

    def runs(
        self, *, agent: str | None = None, version: str | None = None, judged: bool | None = None
    ) -> int:
        """Requests with outcomes, each once whatever number of sources labelled it (the
        figures count labels: a run with outcomes from two sources counts twice there)."""
        return sum(
            n
            for c, n in self.run_counts.items()
            if (agent is None or c.agent == agent)
            and (version is None or c.version == version)
            and (judged is None or c.judged == judged)
        )

    def agents(self) -> list[str]:
        return sorted({c.agent for c in self.counts})

    def sources(self) -> list[str]:
        """The outcome sources present, most counted first."""
        by: Counter[str] = Counter()
        for c, n in self.counts.items():
            if c.view == "rules":
                by[c.source] += n
        return [s for s, _ in by.most_common()]

    def figures(
        self,
        view: str = "final",
        *,
        agent: str | None = None,
        version: str | None = None,
        source: str | None = None,
        judged: bool | None = None,
    ) -> Figures:
        """`view`: a verdict source, or "final" (what was published: the blend where the judge
        answered, the rules elsewhere). `judged`: only the runs the judge answered (True), or
        only the others (False); None: all. `source`: one outcome source (None: all, a run
        with outcomes from two sources counted once for each)."""

        def chosen(c: Cell) -> bool:
            if view == "final":
                if c.view != ("blend" if c.judged else "rules"):
                    return False
            elif c.view != view:
                return False
            return (
                (agent is None or c.agent == agent)
                and (version is None or c.version == version)
                and (source is None or c.source == source)
                and (judged is None or c.judged == judged)
            )

        return figures_of((c, n) for c, n in self.counts.items() if chosen(c))

    def check_rates(self, agent: str | None = None) -> list[RuleRate]:
        """Each team check's rates on the agent's ok and failed runs with outcomes (every
        agent's when None), counted like the rules' per-rule table: a run labelled by two
        sources counts once for each."""
        from tracejudge.judges.agreement.rule_rates import RuleRate  # it imports Share from here

        ok = failed = 0
        on_ok: Counter[str] = Counter()
        on_failed: Counter[str] = Counter()
        for c, n in self.counts.items():
            if agent is not None and c.agent != agent:
                continue
            if c.view == "rules":  # every pair has one rules cell
                if c.ok:
                    ok += n
                else:
                    failed += n
            elif c.view.startswith(CHECK_PREFIX):
                (on_ok if c.ok else on_failed)[c.view] += n
        return [
            RuleRate(name, Share(on_ok[name], ok), Share(on_failed[name], failed))
            for name in sorted(on_ok.keys() | on_failed.keys())
        ]

    def mode_rates(self, agent: str | None = None) -> dict[str, Share]:
        """Per failure mode key, the share of its runs with outcomes that truly failed (every
        agent's when None; a run labelled by two sources counts once for each)."""
        failed: Counter[str] = Counter()
        runs: Counter[str] = Counter()
        for c, n in self.counts.items():
            if c.view.startswith(MODE_PREFIX) and (agent is None or c.agent == agent):
                key = c.view.removeprefix(MODE_PREFIX)
                runs[key] += n
                if not c.ok:
                    failed[key] += n
        return {key: Share(failed[key], runs[key]) for key in runs}

    def to_json(self) -> dict[str, int]:
        return {c.key(): n for c, n in (*self.counts.items(), *self.run_counts.items()) if n}

    @classmethod
    def of_json(cls, data: Mapping[str, int]) -> Tally:
        tally = cls()
        for k, n in data.items():
            tally.add([Cell.of_key(k)], int(n))
        return tally
