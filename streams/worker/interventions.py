"""Interventions while a run runs: each new step event goes through its request's
loop rules and budget (judges/inflight/loops.py, judges/inflight/budgets.py); a crossing goes
out on the control topic at once, before the request ends, beside early-stop decisions.

At most one intervention per kind (budget, loop) per request: the first crossing of each is
sent, and recorded in the window's meta (changelog-backed, as early-stop decisions are), so a
new owner after a rebalance does not send a second, and the evaluation lists it. The counts
live in the run's one state (judges/windows/run_state.py), kept on its open window: dropped
with the window when its partition moves, and made again from the window's records, those
another worker added meanwhile included, the first time the window is touched here again.
Ids are deterministic per request and kind: a crossing sent again after a crash is the same
intervention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tracejudge.judges.checks.book import CheckBook
from tracejudge.judges.inflight.budgets import BudgetBook
from tracejudge.judges.inflight.escalation import CEILING_CALLS, next_action, normal_of
from tracejudge.judges.inflight.loops import LoopFound, LoopRules
from tracejudge.judges.inflight.spend import Crossing
from tracejudge.judges.masking.redact import mask
from tracejudge.judges.rules.agent_norms import Norms
from tracejudge.judges.verdict.encoded import encode
from tracejudge.judges.windows.records import is_stub, read_counted, read_step, step_record
from tracejudge.judges.windows.run_state import RunState
from tracejudge.models.agents import group_of
from tracejudge.models.events import (
    STEP_TYPES,
    Event,
    Iteration,
    ReasoningStep,
    ToolCall,
)
from tracejudge.models.ids import intervention_id
from tracejudge.models.outputs import Intervention
from tracejudge.models.signing import ControlKeys, signed
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import Channel, deliver
from tracejudge.streams.worker.checks import CheckRunner
from tracejudge.streams.worker.windows import OpenWindow, WindowStore

STEPS = (ToolCall, ReasoningStep, Iteration)

LOOP_ORDER = ("repeated_failure", "repeated_call", "no_new_result", "alternating_calls")
LOOP_MESSAGES = {
    "repeated_call": "The same call keeps giving the same result: try something else or stop.",
    "alternating_calls": "Two calls keep taking turns without progress: step back and re-plan.",
    "repeated_failure": "The same call keeps failing the same way: it will not work as it is.",
    "no_new_result": "The last calls learned nothing new: re-plan, or stop and report.",
}


@dataclass
class Intervener:
    rules: LoopRules
    book: BudgetBook
    control: Channel
    clock: Callable[[], float]
    store: WindowStore
    metrics: Metrics = field(default_factory=Metrics)
    keys: ControlKeys | None = None  # what signs the interventions; None: unsigned
    # a team's checks marked per step, run on the run so far at each new step (None: none)
    checks: CheckBook | None = None
    check_runner: CheckRunner | None = None
    ceiling: int = CEILING_CALLS  # tool calls: an agent with no normal yet (escalation.py)

    async def observe(self, event: Event) -> list[Intervention]:
        """Count one new event of an open request (just added to its window); send what it
        crosses."""
        rid = event.request_id
        window = self.store.open.get(rid)
        if window is None:
            return []
        state = window.run
        if state is None or state.agent != window.tally.agent.name:
            # first touched here (new, or read in after an assignment), or its agent is now
            # known by the task: made from the window's records before this event
            state = window.run = self._state(rid, window)
        detailed = self._detailed(window)
        made: list[Intervention] = []
        if isinstance(event, ToolCall) and state.loops is not None:
            # the event as it arrived, whole: the loop rules read it, beyond the step limit too
            found = state.loop(event, True)
            if found:
                # one loop intervention per run: when two rules find it on the same call, the
                # one whose message says most (a failure repeated before a result repeated)
                found.sort(key=lambda f: LOOP_ORDER.index(f.kind))
                made += [m for m in (self._loop(rid, state, found, event),) if m]
        if state.view is not None:
            state.step(event, None if detailed else self._stub(event))
            made += await self._checks(rid, state, event)
        made += [self._budget(rid, state, c, event) for c in state.spend(event)]
        return await self._send(rid, state, made) if made else []

    async def _send(
        self, rid: str, state: RunState, made: list[Intervention]
    ) -> list[Intervention]:
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
                state.budget = None
            elif intervention.kind == "check":
                pass  # one per check and run: what was sent says which
            elif intervention.action == "stop":
                state.loops = None
            elif state.loops is not None:  # told: the loop has to form again after the steer
                state.loops.rearm(intervention.crossed)
        return sent

    def _detailed(self, window: OpenWindow) -> bool:
        """Whether the window keeps its newest step in detail (within the step limit), as the
        per-step checks read it."""
        return self.store.capture and window.meta.step_count <= self.store.max_steps

    def _stub(self, event: Event) -> Callable[[], Event | None]:
        """What the window keeps of a step beyond the step limit, made when it is needed."""
        capture = self.store.capture
        return lambda: read_step(step_record(event, beyond_limit=True, digest=capture))

    def _state(self, rid: str, window: OpenWindow) -> RunState:
        """The run's state made from its window's records before the newest one: counted as
        they were, nothing sent for them (what was sent is in the window's meta)."""
        agent = window.tally.agent_name
        fresh = window.meta.next_seq <= 1  # this event is the window's first: nothing to read
        sent = [] if fresh else self.store.sent(rid)
        limits = self.book.for_agent(agent)
        state = RunState.start(
            agent,
            limits,
            self.rules,
            budget_sent=any(k == "budget" for k, _, _ in sent),
            loops_stopped=("loop", "stop") in {(k, a) for k, _, a in sent},
            checks=() if self.checks is None else self.checks.per_step(agent),
            request_id=rid,
            tail_steps=self.store.tail_steps if self.store.capture else 0,
        )
        _, records = ([], [None]) if fresh else self.store.stored(rid)
        steered = [c for k, c, a in sent if k == "loop" and a == "steer"]
        steps = 0
        for record in records[:-1]:
            if record is None:
                continue
            event = read_step(record)
            counted = event if event is not None else read_counted(record)
            if counted.type in STEP_TYPES:  # as the window counts them for its step limit
                steps += 1
            if event is None:  # a stub with nothing to judge: counted by the budget still
                state.spend(counted)
                continue
            detailed = self.store.capture and steps <= self.store.max_steps
            for found in state.loop(event, not is_stub(record)):
                if found.kind in steered and state.loops is not None:
                    steered.remove(found.kind)
                    state.loops.rearm(found.kind)
            state.step(event, None if detailed else self._stub(event))
            state.spend(event)
        return state

    def _loop(
        self, rid: str, run: RunState, crossings: list[LoopFound], event: ToolCall
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
        normal = normal_of(self._norms(run.agent), self._calls(rid), self.ceiling)
        policy = run.limits.loop_action(found.kind)
        action = next_action(policy, steers, len(steered), stopped, normal)
        if action is None:
            later = steers and policy == "steer_then_stop" and normal.beyond is False
            if later and normal.learning and not stopped and run.loops is not None:
                # an agent with no normal yet, within the ceiling for now: watched again, so
                # its loop is stopped once the run goes past the ceiling, not left to run for
                # good (an agent with a normal is left to it once told twice, as before)
                run.loops.rearm(found.kind)
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

    async def _checks(self, rid: str, state: RunState, event: Event) -> list[Intervention]:
        """The agent's per-step checks that found a failure and were not sent yet: each is sent
        once, with its action. The checks without code were fed this step (`RunState.step`);
        the code checks run on the run so far when `RunState.code_due` says so."""
        assert self.check_runner is not None
        due = state.code_due()
        if due:
            checked = await self.check_runner.run(due, state.run())
            for check, finding in checked.found:
                if finding.severity == "fail":
                    state.found.setdefault(check.name, finding)
        if not state.found:
            return []
        sent = {c for k, c, _ in self.store.sent(rid) if k == "check"}
        made: list[Intervention] = []
        for check in state.checks:
            failure = state.found.get(check.name)
            # sent once: a finding stays in `found` (the steppers that found one are done)
            if failure is None or check.name in sent:
                continue
            made.append(
                Intervention(
                    intervention_id=intervention_id(rid, "check", check.action, check.name),
                    request_id=rid,
                    agent_name=state.agent,
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
            )
        return made

    def _calls(self, rid: str) -> int:
        window = self.store.open.get(rid)
        return 0 if window is None else window.tally.tool_calls

    def _norms(self, agent: str | None) -> Norms | None:
        book = self.store.baselines
        return None if book is None else book.norms(group_of(agent))

    def _budget(self, rid: str, run: RunState, c: Crossing, event: Event) -> Intervention:
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
