"""`tracejudge agreement`: a replay's final verdicts joined to labels, and how they agree.

The join is the live worker's: each final verdict's `kept_of` (with the rules' own verdict of
its judge job, where the judge's replaced it) is kept in a `MemoryAgreementStore`, each label
is an outcome told to it, and the figures come from its `Tally`. So the figures printed here
are those the worker reports for the same events and outcomes, by construction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tracejudge.judges.agreement import NO_AGENT, NO_VERSION, Figures, Share, Tally, kept_of
from tracejudge.judges.rule_rates import RuleRate, rule_rates
from tracejudge.judges.rules import RuleVerdict
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


async def join(result: ReplayResult, labels: Labels) -> Joined:
    """Keep every final verdict, then tell the store every label in order."""
    store = MemoryAgreementStore()
    finals: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    judged = 0
    for rid, published in result.evaluations.items():
        evaluation = Evaluation.model_validate(published)
        if not evaluation.final:  # a pending verdict whose judge job never ran: never kept
            continue
        job = result.judge_jobs.get(rid)
        kept = kept_of(evaluation, RuleVerdict.model_validate(job["rules"]) if job else None)
        await store.keep(rid, kept)
        judged += kept.judged
        findings = tuple(dict.fromkeys(f.rule for f in evaluation.findings))
        finals[rid] = (kept.agent or NO_AGENT, kept.version or NO_VERSION, findings)
    latest: dict[tuple[str, str], bool] = {}  # a later outcome of a source replaces one before
    for row in labels.rows:
        await store.outcome(row.request_id, row.truth, row.at)
        latest[(row.request_id, row.truth.source)] = row.truth.ok
    labelled = {rid for rid, _ in latest}
    runs = [
        Run(finals[rid][0], finals[rid][1], source, ok, finals[rid][2])
        for (rid, source), ok in latest.items()
        if rid in finals
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
    return found


def rates(joined: Joined, block: Block) -> list[RuleRate]:
    return rule_rates(
        (run.findings, run.ok)
        for run in joined.runs
        if run.agent == block.agent
        and block.version in (None, run.version)
        and block.source in (None, run.source)
    )


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
            }
            for block in blocks(joined.tally)
        ],
    }


def counts(joined: Joined) -> dict[str, Any]:
    sources = Counter(run.source for run in joined.runs)
    return {
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
