"""An agent's interventions as the explorer shows them: runs told, by kind, how many stopped
after it, and what stopping saved (the evaluations' estimates, summed), over the verdicts it
holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tracejudge.streams.explorer.store import Verdict


@dataclass
class InterventionFigures:
    runs: int = 0  # runs told at least once
    # kind and action ("loop steer", "check stop") -> (runs told so, runs that made no step
    # after it: a stop obeyed, or the answer right after a steer), each run once
    kinds: dict[str, tuple[int, int]] = field(default_factory=dict)
    saved_runs: int = 0  # stopped runs with an estimate (their agent had a baseline)
    tool_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


def intervention_figures(verdicts: Sequence[Verdict]) -> InterventionFigures:
    figures = InterventionFigures()
    for verdict in verdicts:
        if verdict.interventions:
            figures.runs += 1
        ended: dict[str, bool] = {}
        for kind, stopped in verdict.interventions:  # a run told twice the same way: once
            ended[kind] = ended.get(kind, False) or stopped
        for kind, stopped in ended.items():
            told, stops = figures.kinds.get(kind, (0, 0))
            figures.kinds[kind] = (told + 1, stops + stopped)
        if verdict.saved is not None:
            figures.saved_runs += 1
            figures.tool_calls += verdict.saved[0]
            figures.tokens += verdict.saved[1]
            figures.cost_usd += verdict.saved[2]
    return figures
