"""Making a closed window's verdict: decoding its records, the rules, masking and encoding what
it produces (or, for a request the LLM judge samples, the judge's masked input).

This is most of the CPU a request costs, and none of it needs Kafka or the tables: the window
agent reads the records and hands them over. `make_verdict` is a pure function of what it is
given; the worker, the replay engine and the tests call the same function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracejudge.judges import Judge
from tracejudge.judges.llm.prompt import build_input
from tracejudge.judges.made import Made, encode, made_of
from tracejudge.judges.norms import Norms, RunStats
from tracejudge.judges.records import window_of
from tracejudge.judges.rules import RuleJudge
from tracejudge.judges.sampling import sampled
from tracejudge.judges.timeline import timeline_of
from tracejudge.judges.verdicts import (
    DISABLED,
    SKIPPED,
    JudgeJob,
    Policy,
    WindowFacts,
    conclude,
)
from tracejudge.models.window import ClosedBy


@dataclass(frozen=True)
class LLMRouting:
    """Which closed requests go to the LLM judge, and how much of them it reads."""

    sample_rate: float
    max_input_chars: int


@dataclass(frozen=True)
class Judging:
    """How verdicts are made: the same for every closed window of a worker."""

    tool_call_budget: int
    policy: Policy
    version: str
    llm: LLMRouting | None  # None: the LLM judge is off
    # which requests keep their masked timeline beside the evaluation: "all", "flagged" (not
    # passed, not success, or incomplete: the ones people open; and every judged one), "off",
    # or "no_redis" (off because there is no Redis to keep them in: the evaluation says which)
    timelines: str = "off"


@dataclass(frozen=True)
class Closing:
    """A closed window as the agent read it: its records as stored."""

    request_id: str
    closed_by: ClosedBy
    records: list[Any]
    step_count: int
    steps_dropped: int
    early_stops: list[tuple[str, int]]
    now: float
    terminal_at: float | None
    stats: RunStats | None = None  # counted over every step (None: from the records)
    norms: Norms | None = None  # what is normal for its agent (None: no baselines)


def make_verdict(judging: Judging, closing: Closing, rules: Judge | None = None) -> Made:
    window = window_of(
        closing.request_id,
        closing.records,
        closed_by=closing.closed_by,
        step_count=closing.step_count,
        steps_dropped=closing.steps_dropped,
        early_stops=closing.early_stops,
    )
    rules = rules or RuleJudge(tool_call_budget=judging.tool_call_budget)
    verdict = rules.judge(window, closing.stats, closing.norms)
    facts = WindowFacts.of(window, judging.policy.max_iterations, closing.stats)
    keep = judging.timelines
    kept_at_all = keep in ("all", "flagged")
    not_kept = "no_redis" if keep == "no_redis" else "off"
    llm = judging.llm
    if llm is not None and sampled(closing.request_id, llm.sample_rate):
        timeline = timeline_of(window) if kept_at_all else None
        job = JudgeJob(
            facts=facts,
            rules=verdict,
            content=build_input(window, llm.max_input_chars).content,
            closed_at=closing.now,
            terminal_at=closing.terminal_at,
            timeline=timeline,
            timeline_not_kept=not_kept,
        )
        return Made(closing.request_id, job=encode(job))
    outcome = SKIPPED if llm is not None else DISABLED
    verdict_made = conclude(facts, verdict, outcome, judging.policy, judging.version, closing.now)
    e = verdict_made.evaluation
    # masking a timeline costs about as much as the rules (~200 µs a request): by default only
    # for the requests someone will look into
    flagged = not e.passed or not e.success or e.incomplete
    wanted = keep == "all" or (keep == "flagged" and flagged)
    why_not = "not_flagged" if keep == "flagged" else not_kept
    return made_of(verdict_made, timeline_of(window) if wanted else None, why_not)
