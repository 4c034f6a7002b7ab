"""One open request's state in flight: what its loop rules, budget and per-step checks need,
in one place. Pure.

The worker keeps one per open window, beside the window's records (streams/worker/windows.py:
`OpenWindow.run`), so it is dropped with the window when the window closes or its partition
moves, and made again from the window's records (streams/worker/interventions.py) the first
time the window is touched after that: a worker that gets a partition back never reads a state
that misses the events another worker handled meanwhile.

What it holds:
- `view`: the run as a per-step check reads it, bounded like the window (the first steps in
  detail, then stubs, the last few in detail): the steps the closed run's checks read too;
- `steppers`: the checks without code, each fed one step at a time (constant time per step);
  `found`: the first failure each found, until it is sent;
- `code_at`: how many steps the view had when the per-step code checks last ran. They read the
  whole run, so running them on every step would cost time quadratic in its length: they run
  on each step while the run is short (`EVERY_STEP`), then each time it has grown by a
  `GROWTH`th, so a run's checks cost time linear in its length and a failure is found at most
  a `GROWTH`th of the run after its step;
- `loops`, `budget`: the loop rules' and the budget's counts (None once their one intervention
  per run was sent, or for an agent with no budget).

Replayed from records, the budget counts every step (stubs keep their usage and time); the loop
rules read the steps kept in detail, starting afresh after a stub (a stub has no arguments or
result to compare), so a loop may be found later after a restart, never wrongly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tracejudge.judges.checks.api import Check, Failure, Stepper
from tracejudge.judges.checks.view import Run, RunView, StepView
from tracejudge.judges.inflight.budgets import Budget
from tracejudge.judges.inflight.loops import LoopFound, LoopRules, LoopWatch
from tracejudge.judges.inflight.spend import BudgetWatch, Crossing
from tracejudge.models.events import Event, Iteration, ReasoningStep, ToolCall, usage_of

EVERY_STEP = 64  # steps up to which the per-step code checks run on every new step
GROWTH = 16  # past them, they run again once the run has grown by this fraction of itself
STEPS = (ToolCall, ReasoningStep, Iteration)


@dataclass
class RunState:
    agent: str | None  # by models/agents.py's rule, when the state was made
    limits: Budget
    loops: LoopWatch | None
    budget: BudgetWatch | None
    view: RunView | None = None  # None: the agent has no per-step checks
    checks: tuple[Check, ...] = ()  # the agent's per-step checks
    steppers: dict[str, Stepper] = field(default_factory=dict)
    found: dict[str, Failure] = field(default_factory=dict)
    code_at: int = 0
    _last_index: int = -1
    _goal: str | None = None

    @classmethod
    def start(
        cls,
        agent: str | None,
        limits: Budget,
        rules: LoopRules,
        *,
        budget_sent: bool,
        loops_stopped: bool,
        checks: tuple[Check, ...],
        request_id: str,
        tail_steps: int,
    ) -> RunState:
        state = cls(
            agent,
            limits,
            None if loops_stopped else LoopWatch(limits.loop_rules(rules)),
            None if budget_sent or limits.empty else BudgetWatch(limits),
            RunView(request_id, tail_steps=tail_steps) if checks else None,
            checks,
        )
        state._restart_steppers()
        return state

    # -- each event -------------------------------------------------------------------------

    def spend(self, event: Event) -> list[Crossing]:
        """The budget limits this event crosses."""
        if self.budget is None:
            return []
        usage = usage_of(event)
        tokens = 0 if usage is None else (usage.input_tokens or 0) + (usage.output_tokens or 0)
        return self.budget.observe(
            step=isinstance(event, STEPS),
            tool_call=isinstance(event, ToolCall),
            tokens=tokens,
            cost_usd=0.0 if usage is None else usage.cost_usd or 0.0,
            at=event.ts,
        )

    def loop(self, event: Event, detailed: bool) -> list[LoopFound]:
        """What the loop rules find on this event (`detailed`: its arguments and result are
        known: an event as it arrived, or a record kept whole; not a stub read back)."""
        if self.loops is None or not isinstance(event, ToolCall):
            return []
        if not detailed:  # nothing to compare: the rules start again after it
            self.loops = LoopWatch(self.loops.rules)
            return []
        return self.loops.observe(
            event.tool, event.args_summary, event.success, event.result_preview, event.error
        )

    def step(self, event: Event, stub: Callable[[], Event | None] | None) -> None:
        """Keep the view and feed the steppers (agents with per-step checks only)."""
        if self.view is None:
            return
        goal = self.view.goal
        view = self.view.add(event, stub)
        if self.view.goal != goal and self.steppers:
            self._refeed()  # the goal came after steps (a task exported last): read again
            return
        if view is None:
            return
        if view.index < self._last_index:
            self._refeed()  # a step older than one seen: the steppers read the run again
            return
        self._last_index = view.index
        self._feed(view)

    def code_due(self) -> tuple[Check, ...]:
        """The per-step code checks to run now (see `code_at`), none already found."""
        if self.view is None:
            return ()
        due = tuple(c for c in self.checks if c.stepper is None and c.name not in self.found)
        n = len(self.view.steps)
        if not due or n == self.code_at:
            return ()
        if n > EVERY_STEP and n - self.code_at < max(1, n // GROWTH):
            return ()
        self.code_at = n
        return due

    def run(self) -> Run:
        assert self.view is not None
        return self.view.run()

    # -- the steppers -----------------------------------------------------------------------

    def _restart_steppers(self) -> None:
        goal = None if self.view is None else self.view.goal
        self.steppers = {
            c.name: c.stepper(goal)
            for c in self.checks
            if c.stepper is not None and c.name not in self.found
        }

    def _feed(self, view: StepView) -> None:
        for name, step in list(self.steppers.items()):
            failure = step(view)
            if failure is not None:
                self.found.setdefault(name, failure)
                del self.steppers[name]  # one finding per check and run

    def _refeed(self) -> None:
        assert self.view is not None
        self._restart_steppers()
        for view in self.view.steps:
            self._feed(view)
        self._last_index = self.view.steps[-1].index if self.view.steps else -1
