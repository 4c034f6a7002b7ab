"""The action figures as /metrics families and `tracejudge status` lines, read from
the action tally every process counts into (`store.py`, judges/agreement/action_effects.py).

Labels are bounded: `agent` as the agreement figures bound theirs (live.py's TOP_AGENTS with
most actions asked, the rest "other"), `action` is reflection_1 .. reflection_N
(N: the rounds' bound), early_stop, ran_to_end or generic_retry. Steers are served apart, as
`tracejudge_steer_*{agent,rule}` (`rule`: a loop rule).
Every worker serves the same figures: aggregate with max(), never sum().
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
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
    SteerFigures,
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


STEER_SERIES: tuple[tuple[str, str, Callable[[SteerFigures], float | None]], ...] = (
    ("sent", "Steers sent for the rule, in final evaluations.", lambda f: f.sent),
    (
        "left_loop",
        "Steers after which the rule did not cross again in the run.",
        lambda f: f.left_loop,
    ),
    (
        "ended",
        "Steers after which the run ended on its final response, never stopped.",
        lambda f: f.ended,
    ),
    (
        "stopped",
        "Steers after which the rule crossed again and the run was stopped for it.",
        lambda f: f.stopped,
    ),
    ("passed", "Steered runs whose final verdict passed.", lambda f: f.passed),
    ("success", "Steered runs whose steps succeeded.", lambda f: f.success),
    ("incomplete", "Steered runs judged incomplete.", lambda f: f.incomplete),
    (
        "outcome_ok",
        "Outcomes of steered runs that were ok, once per outcome source.",
        lambda f: f.outcome_ok,
    ),
    (
        "outcome_failed",
        "Outcomes of steered runs that were failed, once per outcome source.",
        lambda f: f.outcome_failed,
    ),
)


def bounded(tally: ActionTally, top: int, other: str) -> ActionTally:
    """The tally with the agents past the `top` with most actions asked (or loops run)
    counted as `other`."""
    asked: Counter[str] = Counter()
    for cell, n in tally.counts.items():
        # actions asked, loops never told to stop, or steers sent
        if cell.field in ("asked", "runs", "sent"):
            asked[cell.agent] += n
    kept = {agent for agent, _ in asked.most_common(top)}
    out = ActionTally()
    for cell, n in tally.counts.items():
        out.counts[cell if cell.agent in kept else ActionCell(other, *cell[1:])] += n
    return out


def families(
    figures: dict[tuple[str, str], ActionFigures],
    steers: Mapping[tuple[str, str], SteerFigures] | None = None,
) -> list[Metric]:
    """The action gauges, then the steers' (`steers`: (agent, rule) -> figures)."""
    return gauge_families(
        "tracejudge_action_",
        "Per agent and action, over the agreement retention; the same on every worker: "
        "aggregate with max().",
        "action",
        SERIES,
        figures,
    ) + gauge_families(
        "tracejudge_steer_",
        "Per agent and loop rule, over the agreement retention; the same on every worker: "
        "aggregate with max().",
        "rule",
        STEER_SERIES,
        steers or {},
    )


def actions_json(tally: ActionTally) -> dict[str, dict[str, Any]]:
    """agent -> action -> its figures, as `tracejudge status --json` shows them (every agent:
    status is read by a person, not scraped)."""
    found: dict[str, dict[str, Any]] = {}
    for (agent, action), f in tally.figures().items():
        found.setdefault(agent, {})[action] = asdict(f)
    return found


def steers_json(tally: ActionTally) -> dict[str, dict[str, Any]]:
    """agent -> loop rule -> what came of its steers, as `tracejudge status --json` shows
    them (every agent)."""
    found: dict[str, dict[str, Any]] = {}
    for (agent, rule), f in tally.steer_figures().items():
        found.setdefault(agent, {})[rule] = asdict(f)
    return found


def steer_lines(figures: dict[str, dict[str, Any]]) -> list[str]:
    """`steers_json`'s figures, a line per agent and rule."""
    lines = []
    for agent, rules in sorted(figures.items()):
        lines.append(f"  {agent}")
        for rule, f in sorted(rules.items()):
            lines.append(f"    {rule}: {steer_words(f)}")
    return lines


def steer_words(f: Mapping[str, Any]) -> str:
    """One rule's steer figures in words, as status, the explorer and replay show them."""
    outcomes = f["outcome_ok"] + f["outcome_failed"]
    return (
        f"steered {f['sent']}"
        + (f" (and {f['unread']} the agent never read)" if f.get("unread") else "")
        + f": left the loop {f['left_loop']}, ended on its own {f['ended']}, "
        f"stopped {f['stopped']}; passed {f['passed']}, success {f['success']}, incomplete "
        f"{f['incomplete']}"
        + (f"; outcomes ok {f['outcome_ok']} of {outcomes}" if outcomes else "")
    )


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
