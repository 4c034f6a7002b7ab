"""A request's spend so far against its budget (judges/inflight/budgets.py), counted as its events
arrive, each limit found on the event that crosses it. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from tracejudge.judges.inflight.budgets import LIMITS, Budget


@dataclass(frozen=True)
class Crossing:
    limit: str  # one of LIMITS
    allowed: float
    used: float  # the count on the event that crossed it


@dataclass
class BudgetWatch:
    """One request's spend so far. Counts every event it is shown, beyond any limit too: the
    evaluation reports what the run used, not where counting stopped."""

    budget: Budget
    steps: int = 0
    tool_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    started_at: float | None = None
    crossed: set[str] = field(default_factory=set)

    def observe(
        self,
        *,
        step: bool,
        tool_call: bool = False,
        tokens: int = 0,
        cost_usd: float = 0.0,
        at: float | None = None,
    ) -> list[Crossing]:
        """Count one event; the limits it crosses (each once per request)."""
        self.steps += step
        self.tool_calls += tool_call
        self.tokens += tokens
        self.cost_usd += cost_usd
        if at is not None:
            self.started_at = at if self.started_at is None else min(self.started_at, at)
            self.wall_s = max(self.wall_s, at - self.started_at)
        found = []
        for limit in LIMITS:
            allowed = getattr(self.budget, limit)
            used = getattr(self, limit)
            if allowed is not None and used > allowed and limit not in self.crossed:
                self.crossed.add(limit)
                found.append(Crossing(limit, allowed, used))
        return found
