"""Making a closed window's verdict: decoding its records, the rules, masking and encoding what
it produces (or, for a request the LLM judge samples, the judge's masked input).

This is most of the CPU a request costs, and none of it needs Kafka or the tables: the window
agent reads the records and hands them over. `make_verdict` is a pure function of what it is
given; the worker, the replay engine and the tests call the same function.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tracejudge.judges import Judge
from tracejudge.judges.checks.apply import Checked, with_checks
from tracejudge.judges.inflight.savings import estimated_saving
from tracejudge.judges.llm.prompt import build_input
from tracejudge.judges.llm.sampling import RateRule, Selection
from tracejudge.judges.rules.agent_norms import Norms, RunStats
from tracejudge.judges.rules.judge import RuleJudge, RuleVerdict
from tracejudge.judges.verdict.conclude import (
    DISABLED,
    PENDING,
    SKIPPED,
    JudgeJob,
    Policy,
    Verdict,
    WindowFacts,
    called_before,
    conclude,
)
from tracejudge.judges.verdict.encoded import Made, encode, made_of
from tracejudge.judges.windows.records import window_of
from tracejudge.judges.windows.timeline import timeline_of
from tracejudge.models.outputs import Evaluation
from tracejudge.models.window import ClosedBy, Fired, Window


@dataclass(frozen=True)
class LLMRouting:
    """Which closed requests go to the LLM judge, and how much of them it reads."""

    sample_rate: float  # of the requests no entry of `rates` is about
    max_input_chars: int | None  # None: the token budget alone
    rates: tuple[RateRule, ...] = ()  # per agent or agent version
    judge_flagged: bool = True  # every flagged request is judged, whatever its rate
    max_input_tokens: int | None = None  # estimated (prompt.estimate_tokens)

    @property
    def selection(self) -> Selection:
        return Selection(self.sample_rate, self.rates, self.judge_flagged)


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
    interventions: list[Fired] = field(default_factory=list)  # sent while it ran
    events_over_cap: int = 0  # events past the cap on events per request, not read


def flagged(evaluation: Evaluation) -> bool:
    """Not passed, not success, or incomplete: the requests people open, whose timelines are
    kept by default and which the LLM judge reads whatever the sample rate."""
    return not evaluation.passed or not evaluation.success or evaluation.incomplete


def touched(evaluation: Evaluation) -> bool:
    """A run a team's check found something in (any severity) or tracejudge told something
    while it ran (a steer too): its timeline is kept with the flagged ones, so the team can
    open every run its check or its steer touched, the ones that passed included."""
    return bool(evaluation.interventions) or any(
        f.rule.startswith("check:") for f in evaluation.findings
    )


def window_for(closing: Closing) -> Window:
    """The closed window as the judges read it."""
    return window_of(
        closing.request_id,
        closing.records,
        closed_by=closing.closed_by,
        step_count=closing.step_count,
        steps_dropped=closing.steps_dropped,
        early_stops=closing.early_stops,
        interventions=closing.interventions,
        events_over_cap=closing.events_over_cap,
    )


def make_verdict(
    judging: Judging,
    closing: Closing,
    rules: Judge | None = None,
    window: Window | None = None,
    checked: Checked | None = None,
) -> Made:
    """`window`: `window_for(closing)` when the caller built it already; `checked`: what the
    agent's team's checks found on it (judges/checks), folded in as a rule's findings."""
    window = window or window_for(closing)
    rules = rules or RuleJudge(tool_call_budget=judging.tool_call_budget)
    verdict = rules.judge(window, closing.stats, closing.norms)
    if checked is not None:
        verdict = with_checks(verdict, checked)
    facts = WindowFacts.of(window, judging.policy.max_iterations, closing.stats)
    if verdict.failed_steps:  # a failing tool's mode names the call before it
        facts.tools_before = called_before(window)
    if facts.interventions:
        stats = closing.stats or RunStats.of(window)
        facts.saved = estimated_saving(facts.interventions, stats, closing.norms)
    keep = judging.timelines
    llm = judging.llm
    # in the sample: judged without making the rule-only verdict first
    if llm is not None and llm.selection.in_sample(
        closing.request_id, facts.agent_name, facts.agent_version
    ):
        return _judge_job(judging, llm, closing, window, facts, verdict)
    outcome = SKIPPED if llm is not None else DISABLED
    verdict_made = conclude(facts, verdict, outcome, judging.policy, judging.version, closing.now)
    is_flagged = flagged(verdict_made.evaluation)
    if llm is not None:
        why_not = llm.selection.why_not(
            closing.request_id, facts.agent_name, facts.agent_version, is_flagged
        )
        if why_not is None:  # flagged: judged whatever the rate
            return _judge_job(judging, llm, closing, window, facts, verdict)
        verdict_made = _noted(verdict_made, why_not)
    # masking a timeline costs about as much as the rules (~200 µs a request): by default only
    # for the requests someone will look into
    wanted = keep == "all" or (
        keep == "flagged" and (is_flagged or touched(verdict_made.evaluation))
    )
    not_kept = "no_redis" if keep == "no_redis" else "off"
    why_no_timeline = "not_flagged" if keep == "flagged" else not_kept
    return made_of(verdict_made, timeline_of(window) if wanted else None, why_no_timeline)


def _judge_job(
    judging: Judging,
    llm: LLMRouting,
    closing: Closing,
    window: Window,
    facts: WindowFacts,
    verdict: RuleVerdict,
) -> Made:
    keep = judging.timelines
    judge_input = build_input(window, llm.max_input_chars, max_tokens=llm.max_input_tokens)
    timeline = timeline_of(window) if keep in ("all", "flagged") else None
    not_kept = "no_redis" if keep == "no_redis" else "off"
    job = JudgeJob(
        facts=facts,
        rules=verdict,
        content=judge_input.content,
        steps_omitted=judge_input.steps_omitted,
        left_out=judge_input.cuts,
        closed_at=closing.now,
        terminal_at=closing.terminal_at,
        timeline=timeline,
        timeline_not_kept=not_kept,
        pending_published=True,
    )
    # the rules' verdict goes out now, the judge's replaces it when it comes: a request never
    # waits on the judge's queue for a verdict (its reflection and alerts do, see PENDING)
    pending = conclude(facts, verdict, PENDING, judging.policy, judging.version, closing.now)
    made = made_of(pending, timeline, not_kept)
    return replace(made, job=encode(job))


def _noted(verdict: Verdict, reason: str) -> Verdict:
    """The verdict, its evaluation saying why the LLM judge did not read the request (shown
    with the other reasons by `tracejudge show` and the explorer)."""
    e = verdict.evaluation
    return replace(verdict, evaluation=e.model_copy(update={"reasons": [*e.reasons, reason]}))
