"""What an intervention saved: the model calls, tokens and cost a stopped run did not spend,
estimated from its agent's normal.

A run stopped in a loop would likely have gone on to its limits; how far is not known. The
estimate takes the least that can be claimed: the tool calls its agent's median run makes
beyond the ones this run made (nothing when it had made that many already), each costing what
this run's calls cost on average. So the figure is a floor, and 0 until the agent has a
baseline (judges/rules/baselines.py).
"""

from __future__ import annotations

from tracejudge.judges.rules.agent_norms import Norms, RunStats
from tracejudge.models.outputs import InterventionMade, Saving


def estimated_saving(
    made: list[InterventionMade], stats: RunStats, norms: Norms | None
) -> Saving | None:
    """None when no intervention stopped the run, or its agent's normal is not known yet."""
    if not any(m.stopped_after and m.action == "stop" for m in made):
        return None
    norm = None if norms is None or not norms.ready else norms.measures.get("tool_calls")
    if norm is None:
        return None
    calls = max(0, round(norm.p50) - stats.tool_calls)
    usage = stats.usage
    per_call = max(1, stats.tool_calls)
    tokens = None if usage is None else (usage.input_tokens + usage.output_tokens) * calls
    cost = None if usage is None or usage.cost_usd is None else usage.cost_usd * calls
    return Saving(
        tool_calls=calls,
        tokens=None if tokens is None else round(tokens / per_call),
        cost_usd=None if cost is None else round(cost / per_call, 6),
    )
