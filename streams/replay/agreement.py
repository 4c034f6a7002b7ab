"""`tracejudge agreement`: final verdicts joined to labels, and how they agree.

The verdicts are a replay's (the events re-evaluated under the settings: `join`) or those the
worker published (its evaluations, as `tracejudge tail evaluations --json` prints them:
`join_published`). The join is the live worker's: each final verdict's `kept_of` (with the
rules' own verdict of its judge job, where the judge's replaced it) is kept in a
`MemoryAgreementStore`, each label is an outcome told to it, and the figures come from its
`Tally`. So the figures printed here are those the worker reports for the same verdicts and
outcomes, by construction. A replay's verdicts can differ a little from the worker's where
they depend on the order runs close (the agent's baseline); the published ones cannot.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from tracejudge.judges.agreement.rule_rates import RuleRate, rule_rates
from tracejudge.judges.agreement.tally import (
    NO_VERSION,
    Figures,
    Kept,
    Share,
    Tally,
    View,
    kept_of,
    views_of,
)
from tracejudge.judges.rules.judge import RuleVerdict
from tracejudge.models.agents import NO_AGENT
from tracejudge.models.outputs import Evaluation
from tracejudge.streams.agreement.store import MemoryAgreementStore
from tracejudge.streams.replay.engine import ReplayResult
from tracejudge.streams.replay.labels import Labels


@dataclass(frozen=True)
class Run:
    """A labelled run as the per-rule table counts it: one per request and outcome source."""

    agent: str
    version: str
    source: str
    ok: bool
    findings: tuple[str, ...]  # every rule that fired, from the evaluation (not clipped)
    mode: str | None = None  # its failure mode's key (docs/modes.md)


@dataclass
class Joined:
    tally: Tally
    runs: list[Run]
    verdicts: int  # final verdicts
    judged: int  # of them, those the LLM judge answered
    labelled: int  # requests with at least one understood label
    no_verdict: list[str]  # labelled requests without a final verdict
    no_label: list[str]  # final verdicts without a label
    labels: Labels = field(default_factory=Labels)
    published: Published | None = None  # the verdicts were read from this, not replayed
    approximated: int = 0  # judged requests whose rules' own view is not known exactly
    mode_names: dict[str, str] = field(default_factory=dict)  # failure mode key -> its name


async def join(result: ReplayResult, labels: Labels) -> Joined:
    """A replay's final verdicts (each judged one with its judge job's rules) and the labels."""
    kept: dict[str, Kept] = {}
    low: dict[str, set[str]] = {}  # evaluation id -> the team dimensions it alerted on
    for alert in result.alerts:
        if alert.get("kind") == "low_dimension" and alert.get("dimension"):
            low.setdefault(str(alert.get("evaluation_id")), set()).add(str(alert["dimension"]))
    for rid, published in result.evaluations.items():
        evaluation = Evaluation.model_validate(published)
        if not evaluation.final:  # a pending verdict whose judge job never ran: never kept
            continue
        job = result.judge_jobs.get(rid)
        kept[rid] = kept_of(
            evaluation,
            RuleVerdict.model_validate(job["rules"]) if job else None,
            frozenset(low.get(evaluation.evaluation_id, ())),
        )
    names = {
        str(e["mode"]["key"]): str(e["mode"]["name"])
        for e in result.evaluations.values()
        if e.get("mode")
    }
    return await _joined(kept, labels, names)


# -- the verdicts as published ----------------------------------------------------------------

SHOWN = 5  # lines not understood named in the report, the rest counted
MODE_NAMES = 10_000  # failure modes named from a file; the rest are shown by their key


@dataclass
class Published:
    """An evaluations file: what the worker kept for each request's last final verdict. Only
    the `Kept` (about 100 bytes) is held per request, so a topic read from its beginning fits."""

    name: str
    finals: dict[str, Kept] = field(default_factory=dict)
    approximated: set[str] = field(default_factory=set)  # their rules' view not known exactly
    judge_statuses: Counter[str] = field(default_factory=Counter)  # of the last finals
    read: int = 0  # lines (records) read
    pending: int = 0  # pending evaluations: never a verdict of their own
    pending_only: int = 0  # requests with a pending evaluation and no final one
    not_understood: int = 0
    examples: list[str] = field(default_factory=list)
    mode_names: dict[str, str] = field(default_factory=dict)  # failure mode key -> its name

    def refuse(self, where: str, why: str) -> None:
        self.not_understood += 1
        if len(self.examples) < SHOWN:
            self.examples.append(f"{where}: {why}")


def read_published(lines: Iterable[bytes], name: str) -> Published:
    """One evaluation a line, in the order published (`tracejudge tail evaluations --json`, or
    `tracejudge replay --out`'s evaluations files). A later final verdict of a request replaces
    an earlier one, as in the live store. A line that is not an evaluation is counted and
    named, never guessed."""
    found = Published(name)
    statuses: dict[str, str] = {}
    # the last pending evaluation of each request: the rules' own verdict of a request the
    # judge then read, which its final evaluation no longer holds
    pending: dict[str, Kept] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        found.read += 1
        where = f"{name}:{number}"
        try:
            value = json.loads(line)
        except ValueError:
            found.refuse(where, "not JSON")
            continue
        kind = value.get("type") if isinstance(value, dict) else type(value).__name__
        if kind != "evaluation":
            found.refuse(where, f"not an evaluation (type {kind})")
            continue
        try:
            evaluation = Evaluation.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            at = ".".join(str(p) for p in first["loc"])
            found.refuse(where, f"not a valid evaluation ({at}: {first['msg']})")
            continue
        rid = evaluation.request_id
        if not evaluation.final:
            found.pending += 1
            pending[rid] = kept_of(evaluation)
            continue
        kept, exact = kept_published(evaluation, pending.get(rid))
        found.finals[rid] = kept
        mode = evaluation.mode
        if mode is not None and len(found.mode_names) < MODE_NAMES:
            found.mode_names.setdefault(mode.key, mode.name)
        statuses[rid] = evaluation.judge_status
        if exact:
            found.approximated.discard(rid)
        else:
            found.approximated.add(rid)
    found.pending_only = len(pending.keys() - found.finals.keys())
    found.judge_statuses = Counter(statuses.values())
    return found


def kept_published(final: Evaluation, pending: Kept | None) -> tuple[Kept, bool]:
    """What the worker kept for a published final verdict, and whether this is it exactly.

    For a request the judge read, the worker keeps the rules' view from the judge job, which
    is not published; the pending evaluation published at close is the same rules' verdict
    (score, alert, success as the rules decided), so with it (`pending`: its `kept_of`) the
    view is exact. Without it (a worker older than pending verdicts, or a file that starts
    later), the view is the published rule_score against the threshold, flagged by the
    published success and incomplete (the judge's, when it gave a verdict): an approximation,
    which the report counts."""
    kept = kept_of(final)
    if final.judge_status != "ok":  # the rules decided: the evaluation is their own verdict
        return kept, True
    if (
        pending is not None
        and pending.threshold == final.warn_threshold
        and pending.rules.score == final.rule_score
    ):
        return replace(kept, rules=pending.rules), True
    near = View.of(final.rule_score, final.warn_threshold, final.success, final.incomplete)
    return replace(kept, rules=near), False


async def join_published(published: Published, labels: Labels) -> Joined:
    """The published final verdicts and the labels."""
    joined = await _joined(published.finals, labels, published.mode_names)
    joined.published = published
    joined.approximated = len(published.approximated)
    return joined


async def _joined(verdicts: dict[str, Kept], labels: Labels, mode_names: dict[str, str]) -> Joined:
    """Keep every final verdict, then tell the store every label in order."""
    store = MemoryAgreementStore()
    finals: dict[str, tuple[str, str, tuple[str, ...], str | None]] = {}
    judged = 0
    for rid, kept in verdicts.items():
        await store.keep(rid, kept)
        judged += kept.judged
        # every rule that fired, by name, unclipped (`Kept.encode` clips; this is in memory)
        finals[rid] = (
            kept.agent or NO_AGENT,
            kept.version or NO_VERSION,
            kept.findings,
            kept.mode,
        )
    latest: dict[tuple[str, str], bool] = {}  # a later outcome of a source replaces one before
    for row in labels.rows:
        await store.outcome(row.request_id, row.truth, row.at)
        latest[(row.request_id, row.truth.source)] = row.truth.ok
    labelled = {rid for rid, _ in latest}
    runs = [
        Run(agent, version, source, ok, findings, mode)
        for (rid, source), ok in latest.items()
        if rid in finals
        for agent, version, findings, mode in [finals[rid]]
    ]
    return Joined(
        tally=await store.tally(),
        runs=runs,
        verdicts=len(finals),
        judged=judged,
        labelled=len(labelled),
        no_verdict=sorted(labelled - finals.keys()),
        no_label=sorted(finals.keys() - labelled),
        labels=labels,
        mode_names=mode_names,
    )


@dataclass(frozen=True)
class Block:
    """The runs of one agent (one version, one outcome source, when there are several)."""

    agent: str
    version: str | None
    source: str | None

    def where(self) -> dict[str, Any]:
        return {"agent": self.agent, "version": self.version, "source": self.source}

    def title(self) -> str:
        parts = [f"agent {self.agent}"]
        if self.version is not None:
            parts.append(f"version {self.version or '(none)'}")
        if self.source is not None:
            parts.append(f"outcomes from {self.source}")
        return ", ".join(parts)


def blocks(tally: Tally) -> Iterator[Block]:
    """Per agent; per version too when an agent has several; per outcome source when there are
    several (a run with outcomes from two sources would otherwise count twice)."""
    for agent in tally.agents():
        mine = [c for c in tally.counts if c.agent == agent]
        versions = sorted({c.version for c in mine})
        sources = sorted({c.source for c in mine})
        for version in [None, *versions] if len(versions) > 1 else [None]:
            for source in sources if len(sources) > 1 else [None]:
                yield Block(agent, version, source)


def views(tally: Tally, block: Block) -> dict[str, Figures]:
    """The rules' figures on every run; with the judge on, what was published (final) on every
    run and rules, judge and blend side by side on the runs the judge answered."""
    found = {"rules": tally.figures("rules", **block.where())}
    blend = tally.figures("blend", judged=True, **block.where())
    if blend.runs:
        found["final"] = tally.figures("final", **block.where())
        found["rules_judged"] = tally.figures("rules", judged=True, **block.where())
        found["judge"] = tally.figures("judge", judged=True, **block.where())
        found["blend"] = blend
    for view in views_of(tally):  # a team's own dimensions, each scored against the outcomes
        figures = tally.figures(view, **block.where())
        if figures.runs:
            found[view] = figures
    return found


def rates(joined: Joined, block: Block) -> list[RuleRate]:
    return rule_rates(
        (run.findings, run.ok)
        for run in joined.runs
        if run.agent == block.agent
        and block.version in (None, run.version)
        and block.source in (None, run.source)
    )


@dataclass(frozen=True)
class ModeRate:
    """A failure mode's labelled runs in a block, and how many truly failed: a mode that is
    mostly false alarms shows as such."""

    key: str
    name: str
    runs: int
    failed: int

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.key, "name": self.name, "runs": self.runs, "failed": self.failed}


def mode_rates(joined: Joined, block: Block) -> list[ModeRate]:
    """The block's failure modes, the most labelled runs first."""
    runs: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for run in joined.runs:
        if (
            run.mode
            and run.agent == block.agent
            and block.version in (None, run.version)
            and block.source in (None, run.source)
        ):
            runs[run.mode] += 1
            failed[run.mode] += not run.ok
    return [
        ModeRate(key, joined.mode_names.get(key, key), n, failed[key])
        for key, n in sorted(runs.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def document(joined: Joined, judge_on: bool) -> dict[str, Any]:
    """Everything `report` prints, as one JSON document."""
    return {
        **counts(joined),
        "judge_on": judge_on,
        "blocks": [
            {
                **block.where(),
                "views": {name: f.as_dict() for name, f in views(joined.tally, block).items()},
                "rules_table": [r.as_dict() for r in rates(joined, block)],
                "modes_table": [m.as_dict() for m in mode_rates(joined, block)],
            }
            for block in blocks(joined.tally)
        ],
    }


def counts(joined: Joined) -> dict[str, Any]:
    sources = Counter(run.source for run in joined.runs)
    p = joined.published
    where: dict[str, Any] = {"verdicts_from": "replay"}
    if p is not None:
        where = {
            "verdicts_from": "evaluations",
            "evaluations_read": p.read,
            "pending_skipped": p.pending,
            "pending_only": p.pending_only,
            "evaluations_not_understood": p.not_understood,
            "evaluations_not_understood_examples": p.examples,
            "rules_view_approximated": joined.approximated,
        }
    return {
        **where,
        "verdicts": joined.verdicts,
        "judged": joined.judged,
        "labelled": joined.labelled,
        "labelled_no_verdict": len(joined.no_verdict),
        "verdicts_no_label": len(joined.no_label),
        "labels_not_understood": joined.labels.not_understood,
        "not_understood_examples": joined.labels.examples,
        "outcomes_by_source": dict(sources.most_common()),
    }


def share(s: Share) -> str:
    """ "3/20 15% [5-36%]", or "-" with nothing to count."""
    if s.value is None or s.interval is None:
        return "-"
    low, high = s.interval
    return f"{s.hits}/{s.count} {s.value:.0%} [{low:.0%}-{high:.0%}]"
