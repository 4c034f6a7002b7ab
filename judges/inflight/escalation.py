"""Steer before stopping: what a loop rule's crossing does to a run. Pure.

A stop cannot be undone (the run is gone, the user waits for a retry); a steer costs one step
(a message to the agent, with the evidence, and the run goes on). So a loop rule's first
crossing steers, and a run is stopped only when the same rule crosses again after the steer,
and only once the run is longer than its agent's runs usually are: a long exploratory run that
is still within its agent's normal is told, not ended. An agent with no normal learned yet
(fewer runs than the baselines' minimum) is held to a generous ceiling instead
(`TRACEJUDGE_LOOP_CEILING_CALLS`, 200 tool calls by default; 0: steered only): a new agent's
runaway loop is ended too, and the intervention says by which measure. Budgets are limits the
team set: crossing one stays a stop.

Per agent and per rule the team chooses (budgets file): `steer` (never stop), `steer_then_stop`
(the default) or `stop` (the first crossing stops, as a budget does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracejudge.judges.rules.agent_norms import Norms

LoopAction = Literal["steer", "steer_then_stop", "stop"]
LOOP_ACTIONS: tuple[LoopAction, ...] = ("steer", "steer_then_stop", "stop")
DEFAULT_LOOP_ACTION: LoopAction = "steer_then_stop"
MAX_STEERS = 2  # per run: told twice, then left to its normal (or to a stop)
# tool calls past which a run of an agent with no normal yet counts as longer than normal: far
# beyond most agents' runs (of the shared coding runs the 90th percentile made 49 calls, the
# longest 60), so it ends runaways, not long work, and only a loop formed again after a steer
CEILING_CALLS = 200
LENGTH = "tool_calls"  # the measure a run's length is held to (agent_norms.MEASURES)


@dataclass(frozen=True)
class Normal:
    """Where the run stands against its agent's usual length, in words for the agent."""

    beyond: bool | None  # None: no normal learned for the agent yet, and no ceiling
    words: str
    learning: bool = False  # no normal learned yet: `beyond` is the ceiling's


def normal_of(norms: Norms | None, calls: int, ceiling: int = CEILING_CALLS) -> Normal:
    """`calls`: the run's tool calls so far. Beyond its normal above the 90th percentile of
    its agent's recent runs (with the sketch's 2 % and one call of slack); with no normal
    learned yet, beyond `ceiling` calls (0: never)."""
    if norms is None or not norms.ready or LENGTH not in norms.measures:
        runs, needed = (0, 0) if norms is None else (norms.runs, norms.min_runs)
        learning = f"no normal learned for this agent yet ({runs} of {needed} runs)"
        if ceiling <= 0:
            return Normal(None, f"{learning}: steering only")
        return Normal(
            calls > ceiling,
            f"{learning}: held to the default ceiling of {ceiling} tool calls; this run has "
            f"made {calls}",
            learning=True,
        )
    p90 = norms.measures[LENGTH].p90
    beyond = calls > p90 * 1.02 + 1
    return Normal(
        beyond,
        f"this agent's runs usually make up to {p90:.0f} tool calls (90th percentile of its "
        f"last {norms.runs} runs); this run has made {calls}",
    )


def next_action(
    policy: LoopAction, rule_steers: int, run_steers: int, stopped: bool, normal: Normal
) -> Literal["steer", "stop"] | None:
    """What a crossing of a loop rule does, given the steers that rule and the whole run had
    already, and whether the run was stopped already (one stop per run)."""
    if stopped:
        return None
    if policy == "stop":
        return "stop"
    if rule_steers and policy == "steer_then_stop" and normal.beyond:
        return "stop"
    return "steer" if run_steers < MAX_STEERS else None
