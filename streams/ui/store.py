"""The verdicts the explorer shows: the newest evaluations read from the topic, with how many
alerts and reflection requests each request got, held in memory and bounded.

Why memory and the topics, not a database: the evaluations topic already is the durable,
ordered record of every verdict (its retention is the history), so the explorer keeps no state
of its own: it reads back TRACEJUDGE_UI_LOOK_BACK_S at start, follows the topic, and holds the
newest TRACEJUDGE_UI_MAX_VERDICTS. Timelines, larger and kept for flagged requests only, stay in
Redis with the evaluation's TTL and are read per request page.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tracejudge.streams.metrics import quadrant

QUADRANTS = tuple(quadrant(s, i) for s in (True, False) for i in (False, True))


def quadrant_of(evaluation: dict[str, Any]) -> str:
    """The verdict's quadrant, named as the metrics and `replay` name it."""
    return quadrant(bool(evaluation.get("success")), bool(evaluation.get("incomplete")))


@dataclass
class Verdict:
    evaluation: dict[str, Any]
    alerts: int = 0
    reflections: int = 0

    @property
    def request_id(self) -> str:
        return str(self.evaluation["request_id"])

    @property
    def agent(self) -> str:
        return str(self.evaluation.get("agent_name") or "-")

    @property
    def version(self) -> str | None:
        value = self.evaluation.get("agent_version")
        return str(value) if value else None

    @property
    def ts(self) -> float:
        return float(self.evaluation.get("ts") or 0.0)

    @property
    def score(self) -> int:
        return int(self.evaluation.get("overall_score") or 0)

    @property
    def quadrant(self) -> str:
        return quadrant_of(self.evaluation)


@dataclass(frozen=True)
class Filters:
    agent: str = ""
    quadrant: str = ""
    passed: str = ""  # "", "yes", "no"
    judge_status: str = ""
    since_ts: float = 0.0

    def admit(self, v: Verdict) -> bool:
        e = v.evaluation
        return (
            (not self.agent or v.agent == self.agent)
            and (not self.quadrant or v.quadrant == self.quadrant)
            and (not self.passed or bool(e.get("passed")) == (self.passed == "yes"))
            and (not self.judge_status or e.get("judge_status") == self.judge_status)
            and v.ts >= self.since_ts
        )


class VerdictStore:
    """The newest `capacity` verdicts by request (a request judged again replaces its verdict);
    alert and reflection counts that arrive before their evaluation wait in a bounded side
    table, as the three topics are read independently."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._verdicts: OrderedDict[str, Verdict] = OrderedDict()
        self._early: OrderedDict[str, list[int]] = OrderedDict()
        self.read = 0  # evaluations read, for the page footer and the tests

    def __len__(self) -> int:
        return len(self._verdicts)

    def add_evaluation(self, evaluation: dict[str, Any]) -> None:
        rid = evaluation.get("request_id")
        if not isinstance(rid, str) or "overall_score" not in evaluation:
            return  # not an evaluation: the page shows what is there, never fails on it
        self.read += 1
        old = self._verdicts.pop(rid, None)
        early = self._early.pop(rid, [0, 0])
        verdict = Verdict(evaluation, *early)
        if old is not None and old.evaluation.get("evaluation_id") == evaluation.get(
            "evaluation_id"
        ):
            verdict.alerts, verdict.reflections = old.alerts, old.reflections  # a redelivery
        self._verdicts[rid] = verdict
        while len(self._verdicts) > self.capacity:
            self._verdicts.popitem(last=False)

    def add_output(self, kind: str, request_id: str) -> None:
        """One alert or reflection request for `request_id`."""
        at = 0 if kind == "alerts" else 1
        verdict = self._verdicts.get(request_id)
        if verdict is not None:
            if at == 0:
                verdict.alerts += 1
            else:
                verdict.reflections += 1
            return
        counts = self._early.setdefault(request_id, [0, 0])
        counts[at] += 1
        while len(self._early) > self.capacity:
            self._early.popitem(last=False)

    def get(self, request_id: str) -> Verdict | None:
        return self._verdicts.get(request_id)

    def newest(self, filters: Filters | None = None) -> Iterator[Verdict]:
        """Newest first (by the evaluation's time)."""
        chosen: Iterable[Verdict] = self._verdicts.values()
        if filters is not None:
            chosen = (v for v in chosen if filters.admit(v))
        return iter(sorted(chosen, key=lambda v: v.ts, reverse=True))

    def of_agent(self, agent: str) -> list[Verdict]:
        """Oldest first."""
        return sorted((v for v in self._verdicts.values() if v.agent == agent), key=lambda v: v.ts)

    def agents(self) -> list[str]:
        return sorted({v.agent for v in self._verdicts.values()})

    def judge_statuses(self) -> list[str]:
        return sorted({str(v.evaluation.get("judge_status")) for v in self._verdicts.values()})
