"""Kinds of process trouble in a run: each common alone in runs that end well, telling together.

A run that changed state without the user's go-ahead, ended on a failed call, looped on one
call, or was longer, more failure-ridden or more back-and-forth than its own agent's runs
usually are is not wrong for any one of these; two or more kinds in one run put it below the
warn threshold (see RuleJudge). "Longer than usual" is only ever measured against the agent's
own runs (`Norms`): a coding agent's 40 commands are its normal, a support bot's are not.
"""

from __future__ import annotations

from tracejudge.judges.masking.clipping import quote_whole
from tracejudge.judges.rules.agent_norms import Norms, RunStats
from tracejudge.models.outputs import FailedStep

# measure -> (finding, what it counts)
RELATIVE: dict[str, tuple[str, str]] = {
    "tool_calls": ("long_for_agent", "tool calls"),
    "state_changes": ("changes_for_agent", "state-changing calls"),
    "failed_calls": ("failures_for_agent", "failed tool calls"),
    "duration_s": ("slow_for_agent", "seconds"),
}


def relative_findings(stats: RunStats, norms: Norms | None) -> list[tuple[str, str]]:
    """Each measure of the run above its agent's 90th percentile, with the evidence; nothing
    while the agent's baseline is still learning."""
    if norms is None or not norms.ready:
        return []
    measures = stats.measures()
    found = []
    for measure, (finding, unit) in RELATIVE.items():
        above = norms.above(measure, measures.get(measure))
        if above is None:
            continue
        severity, norm = above
        where = "far above" if severity == "extreme" else "above"
        found.append(
            (
                finding,
                f"{measures[measure]:.0f} {unit}, {where} this agent's usual "
                f"(median {norm.p50:.0f}, 90th percentile {norm.p90:.0f}, {norms.runs} runs)",
            )
        )
    return found


def trouble_kinds(
    unconfirmed: list[str], ended_on: list[FailedStep], relative: list[tuple[str, str]]
) -> list[str]:
    """Independent kinds of process trouble, each with its evidence. One alone is common in
    runs that end well; two together mark a run that deserves a look."""
    kinds: list[str] = []
    if unconfirmed:
        kinds.append(f"changed state without a go-ahead ({quote_whole(unconfirmed[0], 80)})")
    for last in ended_on[:1]:  # the failed call the run ended on (RuleJudge finds it)
        kinds.append(f"ended on a failed call ({last.tool}: {quote_whole(last.reason, 60)})")
    kinds += [evidence for _, evidence in relative]
    return kinds
