"""Blame measured: how often a failed verdict names the step and the agent the annotators hold
responsible, on Who&When's failed multi-agent runs (`../shared/data/who_when_ag2/`).

    python -m benchmarks.blame                  # rules only
    python -m benchmarks.blame --judge          # with the judge of the TRACEJUDGE_LLM_* settings

Two figures per source:
- *as published*: the runs replayed through the worker's own handlers (`tracejudge replay`);
  a verdict that passes carries no blame and counts as a miss;
- *every failed run*: the blame the verdict would carry had it been flagged (a team that knows
  the run failed, from its outcome), the rules' on each labelled run.
Abstentions count as misses in both; the share named is printed beside. Intervals are Wilson's
95 %. For context, the naive answer "the first agent turn" is measured in the same run; the
published best (Who&When's all-at-once with GPT-4o) names 53.5 % of agents and 14.2 % of steps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.agreement import windows
from benchmarks.data import SHARED_DATA, require
from tracejudge.judges.agreement.tally import wilson
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.models.events import ReasoningStep
from tracejudge.models.window import Window
from tracejudge.settings import Settings
from tracejudge.streams.replay.engine import lines_of, replay

DATA = SHARED_DATA / "who_when_ag2"
Named = tuple[int | None, str | None]  # (step_index, actor); (None, None): nothing named


@dataclass(frozen=True)
class Score:
    source: str
    runs: int
    named: int
    steps: int
    agents: int

    def line(self) -> str:
        def share(hits: int) -> str:
            low, high = wilson(hits, self.runs) or (0.0, 0.0)
            return f"{hits / self.runs:6.1%} [{low:.1%}, {high:.1%}]"

        return (
            f"{self.source:<44} {self.runs:>4} {self.named / self.runs:6.1%}  "
            f"{share(self.steps)}  {share(self.agents)}"
        )


def score(source: str, labels: dict[str, Any], named: dict[str, Named]) -> Score:
    steps = agents = hits = 0
    for rid, label in labels.items():
        step, actor = named.get(rid, (None, None))
        hits += step is not None
        steps += step == label["mistake_step_index"]
        agents += actor is not None and actor == label["mistake_agent"]
    return Score(source, len(labels), hits, steps, agents)


def by_confidence(judge: RuleJudge, runs: dict[str, Window], labels: dict[str, Any]) -> list[str]:
    """Step and agent right per confidence the rules gave: whether it orders them."""
    rows: dict[float, list[int]] = {}
    for rid, window in runs.items():
        blame = judge.judge(window).blame
        if blame is None or blame.abstain or blame.confidence is None:
            continue
        row = rows.setdefault(blame.confidence, [0, 0, 0])
        row[0] += 1
        row[1] += blame.step_index == labels[rid]["mistake_step_index"]
        row[2] += blame.actor == labels[rid]["mistake_agent"]
    return [
        f"  confidence {c:.2f}: {n:>3} runs, step right {s / n:.0%}, agent right {a / n:.0%}"
        for c, (n, s, a) in sorted(rows.items(), reverse=True)
    ]


def first_turn(window: Window) -> Named:
    first = next((s for s in window.steps if isinstance(s, ReasoningStep)), None)
    return (None, None) if first is None else (first.step_index, first.actor)


def rules_blame(judge: RuleJudge) -> Callable[[Window], Named]:
    def named(window: Window) -> Named:
        blame = judge.judge(window).blame
        if blame is None or blame.abstain:
            return None, None
        return blame.step_index, blame.actor

    return named


def published(settings: Settings) -> tuple[dict[str, Named], Counter[str]]:
    records = lines_of((DATA / "events.jsonl").read_bytes())
    result = asyncio.run(replay(settings, records))
    named: dict[str, Named] = {}
    kinds: Counter[str] = Counter()
    for rid, evaluation in result.evaluations.items():
        blame = evaluation.get("blame")
        if blame is None:
            kinds["passed: no blame"] += 1
        elif blame.get("abstain"):
            kinds["abstained"] += 1
        else:
            kinds[f"named ({blame.get('source')}, confidence {blame.get('confidence')})"] += 1
            named[rid] = (blame.get("step_index"), blame.get("actor"))
    return named, kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge", action="store_true", help="with the TRACEJUDGE_LLM_* judge")
    args = parser.parse_args()
    require(DATA, "the Who&When set is the team's (../shared/data/who_when_ag2)")
    logging.getLogger("tracejudge.streams.worker").setLevel(logging.WARNING)
    labels: dict[str, Any] = json.loads((DATA / "labels.json").read_text())
    overrides: dict[str, Any] = {"redis_url": ""}
    if not args.judge:
        overrides["llm_judge_enabled"] = False
    settings = Settings(**overrides)
    runs = windows(DATA / "events.jsonl")
    judge = RuleJudge()
    as_published, kinds = published(settings)
    source = "judge" if settings.llm_judge_enabled else "rules"
    scores = [
        score(f"{source}, as published", labels, as_published),
        score(
            "rules, every failed run", labels, {r: rules_blame(judge)(w) for r, w in runs.items()}
        ),
        score("naive: the first agent turn", labels, {r: first_turn(w) for r, w in runs.items()}),
    ]
    print(f"Who&When (algorithm-generated): {len(labels)} failed AG2 runs")
    head = f"{'source':<44} {'runs':>4} {'named':>6}  {'step right [95% CI]':<24}"
    print(head + "  agent right [95% CI]")
    for s in scores:
        print(s.line())
    print("published verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    print("rules, every failed run, by confidence:")
    print("\n".join(by_confidence(judge, runs, labels)))


if __name__ == "__main__":
    main()
