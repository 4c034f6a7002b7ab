"""Interventions while a run runs: each new step event goes through its request's
loop rules and budget (judges/inflight/loops.py, judges/inflight/budgets.py); a crossing goes
out on the control topic at once, before the request ends, beside early-stop decisions.

At most one intervention per kind (budget, loop) per request: the first crossing of each is
sent, and recorded in the window's meta (changelog-backed, as early-stop decisions are), so a
new owner after a rebalance does not send a second, and the evaluation lists it. The counts
are in memory, not in a table: after a rebalance the new owner starts them from the events it
reads next, so a loop or a budget can be found later than it would have been, never wrongly.
Ids are deterministic per request and kind: a crossing sent again after a crash is the same
intervention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tracejudge.judges.checks.book import CheckBook
from tracejudge.judges.checks.view import RunView
from tracejudge.judges.inflight.budgets import Budget, BudgetBook
from tracejudge.judges.inflight.escalation import next_action, normal_of
from tracejudge.judges.inflight.loops import LoopFound, LoopRules, LoopWatch
from tracejudge.judges.inflight.spend import BudgetWatch, Crossing
from tracejudge.judges.masking.redact import mask
from tracejudge.judges.rules.agent_norms import Norms
from tracejudge.judges.verdict.encoded import encode
from tracejudge.judges.windows.records import window_of
from tracejudge.models.agents import group_of
from tracejudge.models.events import (
    Event,
    FinalResponse,
    Iteration,
    ReasoningStep,
    ToolCall,
    UserMessage,
    usage_of,
)
from tracejudge.models.ids import intervention_id
from tracejudge.models.outputs import Intervention
from tracejudge.models.signing import ControlKeys, signed
from tracejudge.streams.metrics import Metrics
from tracejudge.streams.outputs import Channel, deliver
from tracejudge.streams.worker.checks import CheckRunner
from tracejudge.streams.worker.windows import WindowStore

MAX_RUNS = 100_000  # open requests followed at once; past it the oldest is dropped
STEPS = (ToolCall, ReasoningStep, Iteration)

LOOP_ORDER = ("repeated_failure", "repeated_call", "no_new_result", "alternating_calls")
LOOP_MESSAGES = {
    "repeated_call": "The same call keeps giving the same result: try something else or stop.",
    "alternating_calls": "Two calls keep taking turns without progress: step back and re-plan.",
    "repeated_failure": "The same call keeps failing the same way: it will not work as it is.",
    "no_new_result": "The last calls learned nothing new: re-plan, or stop and report.",
}


@dataclass
class _Run:
    # None once its kind was sent (one per kind per run), or, for the budget, when the agent
    # has none: nothing left to count
    loops: LoopWatch | None
    budget: BudgetWatch | None
    agent: str | None
    limits: Budget = field(default_factory=Budget)  # the agent's budget and loop policy
    calls: int = 0  # tool calls seen: the run's length against its agent's normal
    # the run as its per-step checks read it, kept up to date from the events (None: not
    # needed yet; made from the stored window the first time, after a rebalance too)
    view: RunView | None = None


@dataclass
class Intervener:
    rules: LoopRules
    book: BudgetBook
    control: Channel
    clock: Callable[[], float]
    store: WindowStore
    metrics: Metrics = field(default_factory=Metrics)
    runs: dict[str, _Run] = field(default_factory=dict)
    keys: ControlKeys | None = None  # what signs the interventions; None: unsigned
    # a team's checks marked per step, run on the run so far at each new step (None: none)
    checks: CheckBook | None = None
    check_runner: CheckRunner | None = None

    async def observe(self, event: Event) -> list[Intervention]:
        """Count one new event of an open request; send what it crosses."""
        rid = event.request_id
        run = self.runs.get(rid)
        if run is None:
            if len(self.runs) >= MAX_RUNS:
                self.runs.pop(next(iter(self.runs)))
            agent, fired, budget = event.agent_name, self.store.fired(rid), None
            limits = self.book.for_agent(agent)
            if "budget" not in fired and not limits.empty:
                budget = BudgetWatch(limits)
            stopped = ("loop", "stop") in {(k, a) for k, _, a in self.store.sent(rid)}
            loops = None if stopped else LoopWatch(limits.loop_rules(self.rules))
            run = _Run(loops, budget, agent, limits)
            self.runs[rid] = run
        made: list[Intervention] = []
        if isinstance(event, ToolCall):
            run.calls += 1
        if isinstance(event, ToolCall) and run.loops is not None:
            found = run.loops.observe(
                event.tool, event.args_summary, event.success, event.result_preview, event.error
            )
            # one loop intervention per run: when two rules find it on the same call, the one
            # whose message says most (a failure repeated before a result repeated)
            found = sorted(found, key=lambda f: LOOP_ORDER.index(f.kind))
            made += [m for m in (self._loop(rid, run, found, event),) if m]
        if run.view is not None:
            run.view.add(event)
        if self.checks is not None and isinstance(event, (*STEPS, UserMessage)):
            made += await self._checks(rid, run, event)
        if run.budget is not None:
            usage = usage_of(event)
            tokens = 0 if usage is None else (usage.input_tokens or 0) + (usage.output_tokens or 0)
            cost = 0.0 if usage is None else usage.cost_usd or 0.0
            crossed = run.budget.observe(
                step=isinstance(event, STEPS),
                tool_call=isinstance(event, ToolCall),
                tokens=tokens,
                cost_usd=cost,
                at=event.ts,
            )
            made += [self._budget(rid, run, c, event) for c in crossed]
        sent: list[Intervention] = []
        for intervention in made:
            if intervention.kind == "budget" and "budget" in self.store.fired(rid):
                continue  # one budget crossing per run: the run was told already
            self.store.record_intervention(
                rid,
                intervention.kind,
                intervention.crossed,
                intervention.action,
                intervention.step_index,
            )
            await deliver(
                self.control, rid.encode("utf-8"), signed(encode(intervention), self.keys)
            )
            self.metrics.interventions.labels(intervention.kind, intervention.crossed).inc()
            self.metrics.control_records.labels(
                "none" if self.keys is None else self.keys.scheme
            ).inc()
            sent.append(intervention)
            if intervention.kind == "budget":
                run.budget = None
            elif intervention.kind == "check":
                pass  # one per check and run: what was sent says which
            elif intervention.action == "stop":
                run.loops = None
            elif run.loops is not None:  # told: the loop has to form again after the steer
                run.loops.rearm(intervention.crossed)
        if isinstance(event, FinalResponse):
            self.runs.pop(rid, None)
        return sent

    def forget(self, request_id: str) -> None:
        self.runs.pop(request_id, None)

    def _loop(
        self, rid: str, run: _Run, crossings: list[LoopFound], event: ToolCall
    ) -> Intervention | None:
        """A steer on a rule's first crossing; a stop when it crosses again after the steer,
        the agent's policy allows it and the run is longer than its agent's normal. Of the
        rules one call completes, one that was steered before (a repeat after the steer)."""
        if not crossings:
            return None
        sent = self.store.sent(rid)
        steered = [c for k, c, a in sent if k == "loop" and a == "steer"]
        found = next((f for f in crossings if f.kind in steered), crossings[0])
        steers = steered.count(found.kind)
        stopped = any(k == "loop" and a == "stop" for k, _, a in sent)
        normal = normal_of(self._norms(run.agent), run.calls)
        policy = run.limits.loop_action(found.kind)
        action = next_action(policy, steers, len(steered), stopped, normal)
        if action is None:
            return None
        message = LOOP_MESSAGES[found.kind]
        if action == "stop" and steers:
            message = f"Still looping after being told ({found.kind}): stop."
        return Intervention(
            intervention_id=intervention_id(rid, "loop", action, found.kind, steers + 1),
            request_id=rid,
            agent_name=run.agent,
            kind="loop",
            crossed=found.kind,
            evidence=mask(found.evidence),  # the agent's own arguments and results
            action=action,
            message=message,
            normal=normal.words,
            step_index=event.step_index,
            ts=self.clock(),
            run_nonce=event.run_nonce,
        )

    async def _checks(self, rid: str, run: _Run, event: Event) -> list[Intervention]:
        """The agent's per-step checks not yet sent, on the run up to this step: each that
        fails the run is sent once, with its action. The view is read from the stored window
        once, then kept up to date from the events: a cost only agents with per-step checks
        pay (docs/checks.md)."""
        assert self.checks is not None and self.check_runner is not None
        wanted = self.checks.per_step(run.agent)
        if not wanted:
            return []
        sent = {c for k, c, _ in self.store.sent(rid) if k == "check"}
        due = tuple(c for c in wanted if c.name not in sent)
        if not due or not self.store.is_open(rid):
            return []
        if run.view is None:  # the stored window holds this event already
            meta, records = self.store.stored(rid)
            window = window_of(
                rid,
                records,
                closed_by="idle_timeout",  # not closed: read as far as it goes
                step_count=meta.step_count,
                steps_dropped=meta.steps_dropped,
                early_stops=[],
            )
            run.view = RunView.of_window(window)
        checked = await self.check_runner.run(due, run.view.run())
        made: dict[str, Intervention] = {}
        for check, failure in checked.found:
            if failure.severity != "fail" or check.name in made:
                continue
            made[check.name] = Intervention(
                intervention_id=intervention_id(rid, "check", check.action, check.name),
                request_id=rid,
                agent_name=run.agent,
                kind="check",
                crossed=check.name,
                evidence=mask(failure.message),  # the check's own words: may quote the run
                action=check.action,
                # tracejudge's words and the check's name only: this is what the agent's
                # model may read (client/interventions.py: steer_text)
                message=f"This team's check {check.name} failed on this run: "
                + ("stop." if check.action == "stop" else "change course."),
                step_index=getattr(event, "step_index", None),
                ts=self.clock(),
                run_nonce=event.run_nonce,
            )
        return list(made.values())

    def _norms(self, agent: str | None) -> Norms | None:
        book = self.store.baselines
        return None if book is None else book.norms(group_of(agent))

    def _budget(self, rid: str, run: _Run, c: Crossing, event: Event) -> Intervention:
        return Intervention(
            intervention_id=intervention_id(rid, "budget", "stop", c.limit, 1),
            request_id=rid,
            agent_name=run.agent,
            kind="budget",
            crossed=c.limit,
            allowed=c.allowed,
            used=c.used,
            evidence=f"{c.limit} {c.used:g} over the budget's {c.allowed:g}",
            action="stop",
            message=f"This run has used more than its {c.limit} budget ({c.allowed:g}): stop.",
            step_index=getattr(event, "step_index", None),
            ts=self.clock(),
            run_nonce=event.run_nonce,
        )
