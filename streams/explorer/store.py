"""The verdicts the explorer shows: the newest evaluations read from the topic, with how many
alerts and reflection requests each request got, held in memory and bounded.

Why memory and the topics, not a database: the evaluations topic already is the durable,
ordered record of every verdict (its retention is the history), so the explorer keeps no state
of its own: it reads back TRACEJUDGE_UI_LOOK_BACK_S at start, follows the topic, and holds the
newest TRACEJUDGE_UI_MAX_VERDICTS. Timelines, larger and kept for flagged requests only, stay in
Redis with the evaluation's TTL and are read per request page.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tracejudge.models.agents import NO_AGENT
from tracejudge.streams.shared.metrics import quadrant

QUADRANTS = tuple(quadrant(s, i) for s in (True, False) for i in (False, True))


def quadrant_of(evaluation: dict[str, Any]) -> str:
    """The verdict's quadrant, named as the metrics and `replay` name it."""
    return quadrant(bool(evaluation.get("success")), bool(evaluation.get("incomplete")))


SUMMARY_CHARS = 160  # what the list shows; the request page reads the whole evaluation
MODE_ALERTS = 500  # announcements of failure modes held
# the agent of verdicts whose events named none (agent_name is optional): one group with a
# name that reads as what it is, and works in a link and a filter ("" means "any agent" there)


def agent_label(name: object) -> str:
    """The name the explorer lists an agent under."""
    text = str(name or "")
    return text if text.strip() else NO_AGENT


@dataclass(slots=True)
class Verdict:
    """What the list, the filters and the plots need, and the evaluation as it was read (its
    JSON: a quarter of the memory of the parsed object, parsed again for a request's page)."""

    request_id: str
    evaluation_id: str
    agent: str
    version: str | None
    ts: float
    score: int
    passed: bool
    quadrant: str
    judge_status: str
    summary: str
    raw: bytes
    # the ids of the alerts and reflection requests read for it: a record read twice (a reset
    # of the reader, a producer's retry) counts once
    outputs: set[tuple[str, str]] | None = None
    # its place in a chain of reflections (Evaluation.origin, reflection_round, chain_final):
    # what the request page's chain shows without parsing every link's evaluation again
    parent: str | None = None
    reflection_round: int = 0
    chain_final: bool | None = None
    success: bool = False
    incomplete: bool = False
    # budget and loop interventions while it ran: (kind, stopped after it); what stopping
    # saved: (tool calls, tokens, cost in USD), an estimate (Evaluation.saved)
    interventions: tuple[tuple[str, bool], ...] = ()
    saved: tuple[int, int, float] | None = None
    # the rules and checks that found something (`check:<name>` for a team's), and the team's
    # checks that intervened while it ran: what the finding and check filters read
    findings: frozenset[str] = frozenset()
    checks: frozenset[str] = frozenset()
    # its failure mode: (key, name), None for a clean pass (Evaluation.mode)
    mode: tuple[str, str] | None = None

    @property
    def alerts(self) -> int:
        return sum(kind == "alerts" for kind, _ in self.outputs or ())

    @property
    def reflections(self) -> int:
        return sum(kind != "alerts" for kind, _ in self.outputs or ())

    @classmethod
    def of(cls, evaluation: dict[str, Any], raw: bytes) -> Verdict:
        version = evaluation.get("agent_version")
        summary = str(evaluation.get("summary") or "")
        origin = evaluation.get("origin")
        parent = origin.get("request_id") if isinstance(origin, dict) else None
        final = evaluation.get("chain_final")
        return cls(
            request_id=str(evaluation["request_id"]),
            evaluation_id=str(evaluation.get("evaluation_id") or ""),
            agent=agent_label(evaluation.get("agent_name")),
            version=str(version) if version else None,
            ts=float(evaluation.get("ts") or 0.0),
            score=int(evaluation.get("overall_score") or 0),
            passed=bool(evaluation.get("passed")),
            quadrant=quadrant_of(evaluation),
            # the rules' verdict until the judge's replaces it (Evaluation.final)
            judge_status="pending"
            if evaluation.get("final") is False
            else str(evaluation.get("judge_status")),
            summary=summary
            if len(summary) <= SUMMARY_CHARS
            else summary[: SUMMARY_CHARS - 1] + "…",
            raw=raw,
            parent=parent if isinstance(parent, str) and parent else None,
            reflection_round=_round(evaluation.get("reflection_round")),
            chain_final=final if isinstance(final, bool) else None,
            success=bool(evaluation.get("success")),
            incomplete=bool(evaluation.get("incomplete")),
            interventions=_interventions(evaluation.get("interventions")),
            saved=_saved(evaluation.get("saved")),
            findings=_findings(evaluation.get("findings")),
            checks=_checks(evaluation.get("findings"), evaluation.get("interventions")),
            mode=_mode(evaluation.get("mode")),
        )

    @property
    def evaluation(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.raw)
        return parsed


def _round(value: object) -> int:
    """The reflection round as given, 0 when it is none (a record from an older version)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass(frozen=True)
class Filters:
    agent: str = ""
    quadrant: str = ""
    passed: str = ""  # "", "yes", "no"
    judge_status: str = ""
    since_ts: float = 0.0
    request: str = ""  # a part of the request id
    finding: str = ""  # a rule or check that found something (`check:<name>` for a team's)
    check: str = ""  # a team's check that found something in the run or intervened in it

    def admit(self, v: Verdict) -> bool:
        return (
            (not self.agent or v.agent == self.agent)
            and (not self.finding or self.finding in v.findings)
            and (not self.check or self.check in v.checks)
            and (not self.request or self.request in v.request_id)
            and (not self.quadrant or v.quadrant == self.quadrant)
            and (not self.passed or v.passed == (self.passed == "yes"))
            and (not self.judge_status or v.judge_status == self.judge_status)
            and v.ts >= self.since_ts
        )


class VerdictStore:
    """The newest `capacity` verdicts by request (a request judged again replaces its verdict);
    alert and reflection counts that arrive before their evaluation wait in a bounded side
    table, as the three topics are read independently."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._verdicts: OrderedDict[str, Verdict] = OrderedDict()
        self._early: OrderedDict[str, set[tuple[str, str]]] = OrderedDict()
        # parent request id -> the follow-ups held that name it (their origin.request_id)
        self._children: dict[str, set[str]] = {}
        # the failure modes announced, newest last (the modes topic), for the modes page
        self.mode_alerts: deque[dict[str, Any]] = deque(maxlen=MODE_ALERTS)
        self.read = 0  # evaluations read, for the page footer and the tests
        self.unreadable = 0  # records of the topics skipped: not an output it can read

    def __len__(self) -> int:
        return len(self._verdicts)

    def add_evaluation(self, evaluation: dict[str, Any], raw: bytes | None = None) -> None:
        """`raw`: the evaluation's JSON as read (encoded again when not given)."""
        rid = evaluation.get("request_id")
        if not isinstance(rid, str) or "overall_score" not in evaluation:
            return  # not an evaluation: the page shows what is there, never fails on it
        verdict = Verdict.of(  # raises on a field it cannot read: the reader skips the record
            evaluation, raw if raw is not None else json.dumps(evaluation).encode()
        )
        self.read += 1
        old = self._verdicts.get(rid)
        if (
            old is not None
            and old.evaluation_id == verdict.evaluation_id
            and verdict.judge_status == "pending"
            and old.judge_status != "pending"
        ):
            return  # delivered again after the judge's verdict, which replaced it for good
        self._verdicts.pop(rid, None)
        if old is not None:
            self._unlink(old)
        verdict.outputs = self._early.pop(rid, None)
        if old is not None and old.evaluation_id == verdict.evaluation_id:
            verdict.outputs = old.outputs  # the same verdict again: what came with it stays
        self._verdicts[rid] = verdict
        if verdict.parent is not None:
            self._children.setdefault(verdict.parent, set()).add(rid)
        while len(self._verdicts) > self.capacity:
            _, gone = self._verdicts.popitem(last=False)
            self._unlink(gone)

    def _unlink(self, verdict: Verdict) -> None:
        if verdict.parent is None:
            return
        siblings = self._children.get(verdict.parent)
        if siblings is not None:
            siblings.discard(verdict.request_id)
            if not siblings:  # bounded with the verdicts: no parent kept for nothing
                del self._children[verdict.parent]

    def add_output(self, kind: str, request_id: str, output_id: str) -> None:
        """One alert or reflection request (`kind`: the topic's name) for `request_id`."""
        verdict = self._verdicts.get(request_id)
        if verdict is not None:
            verdict.outputs = (verdict.outputs or set()) | {(kind, output_id)}
            return
        self._early.setdefault(request_id, set()).add((kind, output_id))
        while len(self._early) > self.capacity:
            self._early.popitem(last=False)

    def get(self, request_id: str) -> Verdict | None:
        return self._verdicts.get(request_id)

    def children(self, request_id: str) -> list[Verdict]:
        """The follow-ups held whose origin is `request_id`, oldest first."""
        found = (self._verdicts.get(c) for c in self._children.get(request_id, ()))
        return sorted((v for v in found if v is not None), key=lambda v: v.ts)

    def newest(self, filters: Filters | None = None) -> Iterator[Verdict]:
        """Newest first (by the evaluation's time)."""
        chosen: Iterable[Verdict] = self._verdicts.values()
        if filters is not None:
            chosen = (v for v in chosen if filters.admit(v))
        return iter(sorted(chosen, key=lambda v: v.ts, reverse=True))

    def of_agent(self, agent: str) -> list[Verdict]:
        """Oldest first."""
        return sorted((v for v in self._verdicts.values() if v.agent == agent), key=lambda v: v.ts)

    def by_agent(self) -> dict[str, list[Verdict]]:
        """Every agent's verdicts, oldest first, in one pass."""
        groups: dict[str, list[Verdict]] = {}
        for v in self._verdicts.values():
            groups.setdefault(v.agent, []).append(v)
        return {agent: sorted(vs, key=lambda v: v.ts) for agent, vs in sorted(groups.items())}

    def agents(self) -> list[str]:
        return sorted({v.agent for v in self._verdicts.values()})

    def judge_statuses(self) -> list[str]:
        return sorted({v.judge_status for v in self._verdicts.values()})

    def findings(self) -> list[str]:
        """The rules and checks that found something in the verdicts held."""
        return sorted({f for v in self._verdicts.values() for f in v.findings})

    def checks(self) -> list[str]:
        """The team's checks that found something or intervened in the verdicts held."""
        return sorted({c for v in self._verdicts.values() for c in v.checks})


# how many names a verdict keeps for the filters: an evaluation holds a bounded list already
# (a check's findings are clipped to 20 per run), this bounds one from an older or odd writer
FILTER_NAMES = 64


def _mode(mode: Any) -> tuple[str, str] | None:
    if not isinstance(mode, dict):
        return None
    key, name = mode.get("key"), mode.get("name")
    return (key, name) if isinstance(key, str) and isinstance(name, str) else None


def _findings(findings: Any) -> frozenset[str]:
    if not isinstance(findings, list):
        return frozenset()
    rules = (str(f.get("rule"))[:120] for f in findings[:FILTER_NAMES] if isinstance(f, dict))
    return frozenset(rules)


def _checks(findings: Any, made: Any) -> frozenset[str]:
    named = {f[len("check:") :] for f in _findings(findings) if f.startswith("check:")}
    if isinstance(made, list):
        named |= {
            str(m.get("crossed"))[:120]
            for m in made[:FILTER_NAMES]
            if isinstance(m, dict) and m.get("kind") == "check"
        }
    return frozenset(named)


def _interventions(made: Any) -> tuple[tuple[str, bool], ...]:
    """(kind and action, e.g. "loop steer", whether the run made no step after it)."""
    if not isinstance(made, list):
        return ()
    return tuple(
        (f"{m.get('kind')} {m.get('action')}", bool(m.get("stopped_after")))
        for m in made
        if isinstance(m, dict)
    )


def _saved(saved: Any) -> tuple[int, int, float] | None:
    """Read with care: a record from another producer may carry anything here."""
    if not isinstance(saved, dict):
        return None
    try:
        return (
            int(saved.get("tool_calls") or 0),
            int(saved.get("tokens") or 0),
            float(saved.get("cost_usd") or 0.0),
        )
    except (TypeError, ValueError):
        return None
