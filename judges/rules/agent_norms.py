"""What one run did, counted one way everywhere, and what is normal for its agent.

`Tally` counts a run as its events arrive (the worker keeps one per open window, so counts stay
exact when steps beyond the step limit are stored as stubs); `RunStats` is the result. `Norms`
is a group's normal (quantiles of its recent runs, see `baselines.py`) as the rules read it.
A run is never judged long or troubled by a fixed number: only against its own agent's runs,
and only once that agent has `min_runs` of them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from tracejudge.judges.rules.claims import reads_only
from tracejudge.models.agents import RunAgent
from tracejudge.models.events import Event, ModelUsage, TaskStarted, ToolCall, usage_of
from tracejudge.models.outputs import Usage
from tracejudge.models.window import Window

# what baselines learn of each run (RunStats attributes); duration only when events carry ts
# (user turns were tried and dropped: above an agent's usual, they came as often in runs that
# went well as in failed ones on the customer-service runs, see BENCHMARKS.md)
MEASURES: tuple[str, ...] = ("tool_calls", "state_changes", "failed_calls", "duration_s")
MAX_MODELS = 5  # model names kept per request


def call_key(tool: str, args: str | None) -> str | None:
    """A stable short key of a call (tool and arguments): equal keys are identical calls. Kept
    on the stub of a call beyond the step limit, so a loop is found there too. None when the
    call's arguments are not known: such calls are never identical to another."""
    if args is None:
        return None
    return hashlib.blake2b(f"{tool}\x1f{args}".encode(), digest_size=8).hexdigest()


@dataclass(frozen=True)
class RunStats:
    """Counts over the whole run, including steps beyond the step limit."""

    tool_calls: int = 0
    state_changes: int = 0  # calls whose tool does more than look things up
    failed_calls: int = 0
    # the longest run of identical calls (tool and arguments) one after the other, and its tool
    identical_streak: int = 0
    streak_tool: str | None = None
    duration_s: float | None = None  # first to last event, when events carry timestamps
    agent_name: str | None = None
    usage: Usage | None = None  # model calls, tokens and cost, when steps reported them

    def measures(self) -> dict[str, float]:
        values = {m: getattr(self, m) for m in MEASURES}
        return {m: float(v) for m, v in values.items() if v is not None}

    @classmethod
    def of(cls, window: Window) -> RunStats:
        tally = Tally()
        for event in (window.task, *window.steps, window.final):
            if event is not None:
                tally.add(event)
        return tally.stats()


@dataclass
class Tally:
    """Counts of a run so far, event by event."""

    tool_calls: int = 0
    state_changes: int = 0
    failed_calls: int = 0
    identical_streak: int = 0
    streak_tool: str | None = None
    first_ts: float | None = None
    last_ts: float | None = None
    agent: RunAgent = field(default_factory=RunAgent)  # models/agents.py: the one rule
    last_key: str | None = None
    streak: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    models: list[str] = field(default_factory=list)

    def add(self, event: Event) -> None:
        if isinstance(event, ToolCall):
            self.call(event.tool, call_key(event.tool, event.args_summary), event.success)
        usage = usage_of(event)
        if usage is not None:
            self.model_call(usage)
        self._seen(event.ts, event.agent_name, task=isinstance(event, TaskStarted))

    def model_call(self, usage: ModelUsage | dict[str, Any]) -> None:
        if isinstance(usage, dict):  # as a window read back from its records holds it
            usage = ModelUsage.model_validate(usage)
        self.model_calls += 1
        self.input_tokens += usage.input_tokens or 0
        self.output_tokens += usage.output_tokens or 0
        if usage.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + usage.cost_usd
        if usage.model and usage.model not in self.models and len(self.models) < MAX_MODELS:
            self.models.append(usage.model)

    def add_record(self, record: dict[str, Any]) -> None:
        """A stored step record, whole or a stub (see `judges/windows/records.py`)."""
        kind = record.get("type")
        if kind == "tool_call":
            tool = str(record.get("tool", ""))
            key = record.get("args_key") or call_key(tool, record.get("args_summary"))
            self.call(tool, None if key is None else str(key), bool(record.get("success")))
        usage = record.get("usage")
        if isinstance(usage, dict):
            self.model_call(ModelUsage.model_validate(usage))
        ts = record.get("ts")
        self._seen(
            float(ts) if isinstance(ts, int | float) else None,
            record.get("agent_name"),
            task=kind == "task_started",
        )

    def call(self, tool: str, key: str | None, success: bool) -> None:
        self.tool_calls += 1
        if not reads_only(tool):
            self.state_changes += 1
        self.streak = self.streak + 1 if key is not None and key == self.last_key else 1
        self.last_key = key
        if self.streak > self.identical_streak:
            self.identical_streak, self.streak_tool = self.streak, tool
        if not success:
            self.failed_calls += 1

    @property
    def agent_name(self) -> str | None:
        return self.agent.name

    def _seen(self, ts: float | None, agent_name: Any, *, task: bool) -> None:
        if ts is not None:
            self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
            self.last_ts = ts if self.last_ts is None else max(self.last_ts, ts)
        self.agent.see(agent_name, task=task)

    def stats(self) -> RunStats:
        duration = None
        if self.first_ts is not None and self.last_ts is not None:
            duration = self.last_ts - self.first_ts
        return RunStats(
            tool_calls=self.tool_calls,
            state_changes=self.state_changes,
            failed_calls=self.failed_calls,
            identical_streak=self.identical_streak,
            streak_tool=self.streak_tool,
            duration_s=duration,
            agent_name=self.agent_name,
            usage=None
            if not self.model_calls
            else Usage(
                model_calls=self.model_calls,
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
                cost_usd=None if self.cost_usd is None else round(self.cost_usd, 6),
                models=list(self.models),
            ),
        )


@dataclass(frozen=True)
class Norm:
    """One measure's normal for a group: quantiles of its recent runs."""

    p50: float
    p75: float
    p90: float
    p95: float

    def position(self, value: float) -> float:
        """Roughly where a value falls in the agent's runs: 0 at or below the median, 0.25
        above the 75th percentile, 0.4 above the 90th, 0.45 above the 95th (each with the
        sketch's 2 % and one count of slack)."""
        for quantile, at in ((self.p95, 0.45), (self.p90, 0.4), (self.p75, 0.25), (self.p50, 0.0)):
            if value > quantile * 1.05 and value > self.p50 + 1:
                return at if at else 0.1
        return 0.0


@dataclass(frozen=True)
class Norms:
    """A group's normal, as learned when the run closed (before the run itself was added)."""

    group: str
    runs: int  # runs the quantiles are over
    min_runs: int  # runs needed before anything is judged against them
    measures: dict[str, Norm] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.runs >= self.min_runs

    def position(self, measure: str, value: float | None) -> float:
        """Where a run's measure falls in its agent's runs (see `Norm.position`); 0 when
        nothing is known yet."""
        norm = self.measures.get(measure)
        if not self.ready or norm is None or value is None:
            return 0.0
        return norm.position(value)

    def above(self, measure: str, value: float | None) -> tuple[str, Norm] | None:
        """How far above its agent's normal a value is: "high" above the 90th percentile,
        "extreme" above the 95th; None when it is within the normal, or nothing is known.
        A value at most one more than the median is never high: on counts that are usually
        small (0 failures, 1 turn), the upper quantiles are the median itself."""
        norm = self.measures.get(measure)
        if not self.ready or norm is None or value is None:
            return None
        if value <= norm.p50 + 1 or value <= norm.p90 * 1.05:
            return None
        return ("extreme" if value > norm.p95 * 1.05 else "high"), norm
