"""The action figures as /metrics families and `tracejudge status` lines, read from
the action tally every process counts into (`store.py`, judges/agreement/action_effects.py).

Labels are bounded: `agent` as the agreement figures bound theirs (live.py's TOP_AGENTS with
most actions asked, the rest "other"), `action` is reflection_1 .. reflection_N
(N: the rounds' bound), early_stop, ran_to_end or generic_retry.
Every worker serves the same figures: aggregate with max(), never sum().
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from prometheus_client.core import Metric

from tracejudge.judges.agreement.action_effects import (
    EARLY_STOP,
    GENERIC_RETRY,
    RAN_TO_END,
    ActionCell,
    ActionFigures,
    ActionTally,
)
from tracejudge.streams.agreement.gauges import gauge_families

SERIES: tuple[tuple[str, str, Callable[[ActionFigures], float | None]], ...] = (
    ("asked", "Actions asked (reflection requests published).", lambda f: f.asked),
    (
        "followed_up",
        "Follow-ups whose verdict came within TRACEJUDGE_ACTION_FOLLOWUP_WINDOW_S.",
        lambda f: f.followed_up,
    ),
    ("late", "Follow-ups whose verdict came after the window.", lambda f: f.late),
    ("success", "Follow-ups within the window whose steps succeeded.", lambda f: f.success),
    ("complete", "Follow-ups within the window that finished the goal.", lambda f: f.complete),
    ("fixed", "Follow-ups within the window both success and complete.", lambda f: f.fixed),
    (
        "score_change_mean",
        "Mean of the follow-up's score minus its origin's.",
        lambda f: f.mean_score_change,
    ),
    (
        "seconds_mean",
        "Mean seconds from the origin's verdict to the follow-up's.",
        lambda f: f.mean_seconds,
    ),
    ("runs", "ran_to_end: iterative runs never told they may stop.", lambda f: f.runs),
    (
        "rounds_saved",
        "early_stop: rounds not run by the loops that stopped when told.",
        lambda f: f.rounds_saved,
    ),
    (
        "score_mean",
        "early_stop: mean score of the loops that stopped; ran_to_end: of all.",
        lambda f: f.mean_score,
    ),
)


def bounded(tally: ActionTally, top: int, other: str) -> ActionTally:
    """The tally with the agents past the `top` with most actions asked (or loops run)
    counted as `other`."""
    asked: Counter[str] = Counter()
    for cell, n in tally.counts.items():
        if cell.field in ("asked", "runs"):  # actions asked, or loops never told to stop
            asked[cell.agent] += n
    kept = {agent for agent, _ in asked.most_common(top)}
    out = ActionTally()
    for cell, n in tally.counts.items():
        out.counts[cell if cell.agent in kept else ActionCell(other, *cell[1:])] += n
    return out


def families(figures: dict[tuple[str, str], ActionFigures]) -> list[Metric]:
    return gauge_families(
        "tracejudge_action_",
        "Per agent and action, over the agreement retention; the same on every worker: "
        "aggregate with max().",
        "action",
        SERIES,
        figures,
    )


def actions_json(tally: ActionTally) -> dict[str, dict[str, Any]]:
    """agent -> action -> its figures, as `tracejudge status --json` shows them (every agent:
    status is read by a person, not scraped)."""
    found: dict[str, dict[str, Any]] = {}
    for (agent, action), f in tally.figures().items():
        found.setdefault(agent, {})[action] = asdict(f)
    return found


def action_lines(figures: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for agent, actions in sorted(figures.items()):
        lines.append(f"  {agent}")
        for action, f in sorted(actions.items()):
            lines.append(f"    {action}: {action_words(action, f)}")
    return lines


def action_words(action: str, f: dict[str, Any]) -> str:
    """One action's figures in words (`actions_json`'s values), as status and the explorer
    show them."""
    change, seconds, score = f["mean_score_change"], f["mean_seconds"], f["mean_score"]
    mean = "" if score is None else f", mean score {score:.1f}"
    if action == RAN_TO_END:
        return f"{f['runs']} runs, success {f['success']}, complete {f['complete']}{mean}"
    if action == EARLY_STOP:
        return (
            f"asked {f['asked']}, stopped {f['followed_up']} (rounds saved "
            f"{f['rounds_saved']}), success {f['success']}, complete {f['complete']}{mean}"
        )
    if action == GENERIC_RETRY:
        return f"asked {f['asked']}, answered {f['followed_up']}, substantive {f['fixed']}"
    return (
        f"asked {f['asked']}, followed up {f['followed_up']} (late {f['late']}), complete "
        f"{f['complete']}, fixed {f['fixed']}"
        + ("" if change is None else f", score {change:+.1f}")
        + ("" if seconds is None else f", after {seconds:.0f}s")
    )
