"""The rules' settings: windows, early stops, interventions, budgets, checks, baselines."""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    model_validator,
)

from tracejudge.judges.agreement.calibration import CalibrationRule
from tracejudge.judges.checks.book import CheckBook
from tracejudge.judges.inflight.budgets import BudgetBook
from tracejudge.judges.inflight.early_stop import DEFAULT_MAX_ITERATIONS, EarlyStopPolicy
from tracejudge.judges.inflight.escalation import CEILING_CALLS
from tracejudge.judges.inflight.loops import LoopRules

# Defaults of the judges' own settings are theirs: written there once, read here.
from tracejudge.judges.rules.baselines import DEFAULT_EPOCH_RUNS, DEFAULT_MIN_RUNS
from tracejudge.judges.rules.judge import DEFAULT_TOOL_CALL_BUDGET
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.settings.problems import SettingProblem


class RuleSettings(BaseModel):
    """How the rules decide, and the other judges: windows, thresholds, reflection, baselines,
    early stops, retries."""

    max_trace_steps: int = Field(50, ge=1, description="Steps kept in detail per request.")
    max_events_per_request: int = Field(
        20_000,
        ge=100,
        description="Events read per request: past it an event is counted, not kept, counted "
        "or checked (a final_response still closes the request), and the evaluation says how "
        "many (`events_over_cap`); /metrics counts them as tracejudge_events_total{status="
        '"over_cap"}. Bounds what one request costs the worker and its changelog.',
    )
    trace_tail_steps: int = Field(
        10,
        ge=0,
        le=200,
        description="Beyond TRACEJUDGE_MAX_TRACE_STEPS, the last steps also kept in detail (in "
        "memory) so the judge sees how a long run ended; failed steps beyond the limit keep a "
        "digest (tool, arguments, head and tail of the error) whatever this says.",
    )
    warn_threshold: int = Field(
        Policy.warn_threshold,
        ge=0,
        le=100,
        description="Scores below it raise an alert (an agent with a calibration uses its own: "
        "TRACEJUDGE_CALIBRATION_ENABLED).",
    )
    calibration_enabled: bool = Field(
        True,
        description="Per agent, replace TRACEJUDGE_WARN_THRESHOLD by the threshold its own "
        "outcomes say alerts at most TRACEJUDGE_CALIBRATION_TARGET of its ok runs, once it has "
        "the minimum of ok and failed outcomes (learned from the agreement tally in Redis, "
        "refreshed every TRACEJUDGE_CALIBRATION_REFRESH_S; verdicts made after use it, and "
        "each names its calibration). On by default: nothing changes until outcomes are sent, "
        "and a fixed threshold alerts anywhere from none to most of an agent's good runs "
        "depending on how its scores fall. Off: the fixed threshold for every agent.",
    )
    calibration_target: float = Field(
        CalibrationRule.target,
        gt=0,
        le=0.5,
        description="The share of an agent's ok runs a calibrated threshold may alert. 5 % by "
        "default: alerts people keep reading (one in twenty good runs), while the threshold "
        "stays high enough to flag most runs that score like failures.",
    )
    calibration_min_ok_runs: int = Field(
        CalibrationRule.min_ok_runs,
        ge=1,
        description="Ok outcomes an agent needs before its threshold is calibrated. Below about "
        "30 the threshold rests on the lowest one or two ok runs and moves many points with "
        "each new outcome (and under 1/target - 1 no threshold can keep the target at all).",
    )
    calibration_min_failed_runs: int = Field(
        CalibrationRule.min_failed_runs,
        ge=1,
        description="Failed outcomes an agent needs before its threshold is calibrated: both "
        "kinds present, so the outcomes come from something that reports failures, not only "
        "successes.",
    )
    calibration_refresh_s: float = Field(
        60.0,
        ge=1,
        description="How often the worker and `tracejudge judge` learn the calibrations again "
        "from the agreement tally (one Redis read of the tally each time).",
    )
    reflection_enabled: bool = Field(
        Policy.reflection_enabled, description="Emit reflection requests."
    )
    max_reflection_rounds: int = Field(
        Policy.max_reflection_rounds, ge=0, description="Reflection rounds before giving up."
    )
    tool_call_budget: int = Field(
        DEFAULT_TOOL_CALL_BUDGET,
        ge=0,
        description="A hard budget of tool calls per request, beyond which efficiency drops; "
        "0: none (a request is judged long only against its own agent's normal).",
    )
    baseline_min_runs: int = Field(
        DEFAULT_MIN_RUNS,
        ge=1,
        description="Closed requests an agent needs before its runs are judged against its "
        "normal (calls, state changes, failures, duration); until then no relative penalty.",
    )
    baseline_epoch_runs: int = Field(
        DEFAULT_EPOCH_RUNS,
        ge=10,
        description="An agent's normal is learned from its last 1-2 epochs of this many "
        "requests (per partition): older runs are forgotten.",
    )
    early_stop_enabled: bool = Field(True, description="Decide early stops of iterative loops.")
    min_iterations: int = Field(
        EarlyStopPolicy.min_iterations, ge=1, description="No early stop before this iteration."
    )
    max_iterations: int = Field(
        DEFAULT_MAX_ITERATIONS,
        ge=1,
        description="Rounds of an iterative loop whose events carry no max_iterations: no "
        "early-stop decision at the last one, and the evaluation reports iterations against it.",
    )
    early_stop_consecutive: int = Field(
        EarlyStopPolicy.consecutive_successes,
        ge=1,
        description="Successful executions in a row that give a hint.",
    )
    interventions_enabled: bool = Field(
        True,
        description="Tell a run on the control topic, while it runs, that it crossed its budget "
        "or is in a loop (judges/inflight/loops.py, judges/inflight/budgets.py).",
    )
    loop_ceiling_calls: int = Field(
        CEILING_CALLS,
        ge=0,
        description="Tool calls past which a run of an agent with no normal learned yet counts "
        "as long: its loop, found again after a steer, is stopped (with a normal, the agent's "
        "own 90th percentile decides). 0: such runs are only steered.",
    )
    budgets_file: str = Field(
        "",
        description='A TOML file of per-request budgets: [default] and [agents."NAME"] '
        "tables of steps, tool_calls, tokens, cost_usd, wall_s, and the agents' own loop_* "
        "thresholds (judges/inflight/budgets.py); checked at start. Empty: no budgets.",
    )
    loop_repeat: int = Field(
        LoopRules.repeat, ge=0, le=32, description="The same call and result in a row (0: off)."
    )
    loop_cycles: int = Field(
        LoopRules.cycles, ge=0, le=32, description="Turns of two calls taking turns (0: off)."
    )
    loop_same_failure: int = Field(
        LoopRules.same_failure, ge=0, le=32, description="The same failure in a run (0: off)."
    )
    loop_no_new_result: int = Field(
        LoopRules.no_new_result,
        ge=0,
        le=32,
        description="Calls in a row with no result the run had not seen (0: off).",
    )

    checks: str = Field(
        "",
        description="A team's own checks, comma-separated module:function, run on every closed "
        "run of every agent (docs/checks.md); packages add theirs through the "
        "tracejudge.checks entry-point group. Empty: none.",
    )
    checks_file: str = Field(
        "",
        description='A TOML file of per-agent checks: [default] and [agents."NAME"] tables of '
        "code checks and checks without code (never_call, call_before, needs_confirmation, "
        "max_calls, final_must_match, final_must_not_match; docs/checks.md); checked at start.",
    )
    check_timeout_s: float = Field(
        2.0,
        gt=0,
        description="How long a run's checks may take together; a code check still running "
        "then is ended with its check process, counted and left out, the verdict made without "
        "it.",
    )
    check_processes: int = Field(
        2,
        ge=1,
        le=64,
        description="Processes that run a team's code checks, apart from the worker's: a check "
        "that hangs or spins the CPU holds one of them until its time limit ends it, never the "
        "worker's event loop (docs/checks.md).",
    )

    _budget_book: BudgetBook = PrivateAttr(default_factory=BudgetBook)
    _check_book: CheckBook = PrivateAttr(default_factory=CheckBook)

    @model_validator(mode="after")
    def _interventions_readable(self) -> Self:
        # checked with the other settings, so a bad threshold or budgets file stops every
        # command at start, before anything connects, naming what is wrong
        for rule in ("repeat", "cycles", "same_failure", "no_new_result"):
            try:  # one at a time (the others at their defaults), to name the one
                LoopRules(**{rule: getattr(self, f"loop_{rule}")})
            except ValueError as exc:
                raise SettingProblem(str(exc), f"loop_{rule}") from None
        # read once, here: the worker's budget_book() is this book, not a second reading
        try:
            self._budget_book = (
                BudgetBook.read(Path(self.budgets_file)) if self.budgets_file else BudgetBook()
            )
        except ValueError as exc:
            raise SettingProblem(str(exc), "budgets_file") from None
        try:  # team modules imported now: a typo stops the start, not a run
            self._check_book = CheckBook.read(self.checks, self.checks_file)
        except ValueError as exc:
            name = "checks_file" if "checks file" in str(exc) else "checks"
            raise SettingProblem(str(exc), name) from None
        return self

    generic_max_retries: int = Field(
        1, ge=0, description="Retries of a generic or clarification-only answer."
    )
