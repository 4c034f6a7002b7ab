"""The effect of the actions tracejudge asks agents for, as counts.

Reflections. An action asked (a reflection request of round n) counts `asked` once; a
follow-up (a request whose task_started names the asking request as its parent) counts once,
against its parent's kept verdict: `followed_up` within the window (else `late`), `success`,
`complete`, `fixed` (both), and the sums the means come from (score change, seconds to the
follow-up). The counts are hash fields `agent \\x1f action \\x1f field` in day buckets
(streams/agreement/store.py), the same shape as the agreement tally, so each process reads the
figures of all.

Early stops (`iterations`): counted at an iterative run's close, beside the runs never told
to stop. Generic retries (`retry_asked`, `retry_answered`): a retry request asked, an answer
given to one (the contract's `attempt` >= 1 on the same session), fixed when substantive; no
score and no time: an answer is not a judged run, and the retry request's time is not kept.

Steers (`steered`, `steer_outcomes`): each steer a final evaluation lists (`interventions`,
action steer) counts once under the action `steer:<rule>`: sent, and what the run did after it
(left the loop, ended on its own, was stopped for that rule), its final verdict, and each
outcome of the run once it arrives (joined to the kept verdict, which names the rules steered).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from tracejudge.judges.agreement.tally import Kept
from tracejudge.models.agents import NO_AGENT

if TYPE_CHECKING:
    from tracejudge.models.outputs import InterventionMade

# the sums: score_change and seconds are over `followed_up`; score over `followed_up` (early
# stops) or `runs` (runs that ran to the end)
SUMS = ("score_change", "seconds", "rounds_saved", "score")
COUNTS = ("asked", "followed_up", "late", "success", "complete", "fixed", "runs")
EARLY_STOP = "early_stop"  # an iterative run told it may stop (stop / finalize decisions)
RAN_TO_END = "ran_to_end"  # an iterative run never told so: what early stops compare with
GENERIC_RETRY = "generic_retry"  # a generic or clarifying answer's retry request
STEER = "steer:"  # a loop rule's steer: the action steer:<rule>, apart from the others
STEER_COUNTS = (
    "sent",
    "unread",
    "left_loop",
    "ended",
    "stopped",
    "passed",
    "success",
    "incomplete",
    "outcome_ok",
    "outcome_failed",
)

Amounts = list[tuple[str, int]]  # hash field -> amount to add


def reflection(round_: int) -> str:
    """The action kind of a reflection request of round `round_` (1, 2, ...)."""
    return f"reflection_{round_}"


class ActionCell(NamedTuple):
    agent: str
    action: str
    field: str

    def key(self) -> str:
        return "\x1f".join(self)

    @classmethod
    def of_key(cls, key: str) -> ActionCell:
        agent, action, name = key.split("\x1f")
        return cls(agent, action, name)


def asked(kept: Kept, action: str) -> Amounts:
    """What a verdict that asks for `action` counts."""
    return [(ActionCell(kept.agent or NO_AGENT, action, "asked").key(), 1)]


def followed(origin: Kept, follow_up: Kept, window_s: float) -> Amounts:
    """What a follow-up counts against its origin's kept verdict. The time is from the origin's
    verdict to the follow-up's (both kept, in whole seconds): the follow-up's start is not
    kept, and a run's own length is in the follow-up's evaluation. Late: past `window_s`, the
    follow-up is counted as late and nothing else (the window is what `followed_up` means)."""
    agent = origin.agent or NO_AGENT
    action = reflection(follow_up.round)

    def cell(name: str) -> str:
        return ActionCell(agent, action, name).key()

    seconds = max(0, round(follow_up.ts - origin.ts))
    if seconds > window_s:
        return [(cell("late"), 1)]
    success = bool(follow_up.success)
    complete = not follow_up.incomplete
    found: Amounts = [(cell("followed_up"), 1), (cell("seconds"), seconds)]
    found += [(cell(n), 1) for n, on in (("success", success), ("complete", complete)) if on]
    if success and complete:
        found.append((cell("fixed"), 1))
    if origin.score is not None and follow_up.score is not None:
        found.append((cell("score_change"), follow_up.score - origin.score))
    return found


def iterations(
    agent: str | None,
    *,
    decided: bool,
    used: int,
    limit: int | None,
    success: bool,
    complete: bool,
    score: int,
) -> Amounts:
    """What an iterative run counts at its close. Told it may stop (`decided`): an early stop
    asked, followed when the run stopped before its limit (`limit` - `used` rounds saved).
    Never told: a run that ran to the end, the verdicts early-stopped runs are read beside."""
    action = EARLY_STOP if decided else RAN_TO_END

    def cell(name: str) -> str:
        return ActionCell(agent or NO_AGENT, action, name).key()

    found: Amounts = []
    if decided:
        found.append((cell("asked"), 1))
        saved = 0 if limit is None else max(0, limit - used)
        if not saved:  # stopped at the limit, or told so too late to save a round
            return found
        found += [(cell("followed_up"), 1), (cell("rounds_saved"), saved)]
    else:
        found.append((cell("runs"), 1))
    found += [(cell(n), 1) for n, on in (("success", success), ("complete", complete)) if on]
    if success and complete:
        found.append((cell("fixed"), 1))
    found.append((cell("score"), score))
    return found


def retry_asked(agent: str | None) -> Amounts:
    """A generic or clarifying answer the worker asked to retry."""
    return [(ActionCell(agent or NO_AGENT, GENERIC_RETRY, "asked").key(), 1)]


def retry_answered(agent: str | None, substantive: bool) -> Amounts:
    """An answer given to a retry (attempt 1, 2...): fixed when it is substantive."""

    def cell(name: str) -> str:
        return ActionCell(agent or NO_AGENT, GENERIC_RETRY, name).key()

    return [(cell("followed_up"), 1)] + ([(cell("fixed"), 1)] if substantive else [])


def steer_action(rule: str) -> str:
    """The action kind of a steer sent for `rule` (a loop rule)."""
    return STEER + rule


def steer_rule(action: str) -> str | None:
    """The rule of a steer's action kind; None for every other action."""
    return action[len(STEER) :] if action.startswith(STEER) else None


def steered(
    agent: str | None,
    made: Sequence[InterventionMade],
    *,
    closed_by: str,
    passed: bool,
    success: bool,
    incomplete: bool,
) -> Amounts:
    """What a final evaluation's steers count, each steer once (`made`: its `interventions`,
    in the order they were sent). After a steer, the run left the loop when no later entry
    names the same rule; it was stopped when a later stop for that rule has `stopped_after`;
    it ended on its own when it closed on its final response and no stop (for any rule or
    budget) came after the steer. Each steer also counts the run's final verdict."""
    found: Counter[str] = Counter()
    verdict = [
        n for n, on in (("passed", passed), ("success", success), ("incomplete", incomplete)) if on
    ]
    for i, m in enumerate(made):
        # a loop rule's steers only: a team's check steers once per run and has no loop to
        # leave (its figures against outcomes are the checks' own, `Tally.check_rates`)
        if m.action != "steer" or m.kind != "loop":
            continue
        if m.read is False:  # the agent never saw it: what came after says nothing of it
            found[ActionCell(agent or NO_AGENT, steer_action(m.crossed), "unread").key()] += 1
            continue
        later = made[i + 1 :]
        same = [x for x in later if (x.kind, x.crossed) == (m.kind, m.crossed)]
        names = ["sent", *verdict]
        if not same:
            names.append("left_loop")
        if any(x.action == "stop" and x.stopped_after for x in same):
            names.append("stopped")
        if closed_by == "final_response" and not any(x.action == "stop" for x in later):
            names.append("ended")
        for name in names:
            found[ActionCell(agent or NO_AGENT, steer_action(m.crossed), name).key()] += 1
    return sorted(found.items())


def steer_outcomes(kept: Kept, ok: bool) -> Amounts:
    """What one outcome of a steered run counts: for each steer its kept verdict names,
    `outcome_ok` or `outcome_failed` (nothing for a run never steered)."""
    name = "outcome_ok" if ok else "outcome_failed"
    found = Counter(
        ActionCell(kept.agent or NO_AGENT, steer_action(r), name).key() for r in kept.steered
    )
    return sorted(found.items())


@dataclass(frozen=True)
class SteerFigures:
    """What came of the steers sent for one loop rule (`steered`, `steer_outcomes`)."""

    sent: int
    # sent and never given to the agent's model (its client said so): not in the figures below,
    # which are of the steers the agent read (or whose client does not say)
    unread: int
    left_loop: int  # no later crossing of the rule in the run
    ended: int  # closed on its final response, no stop after the steer
    stopped: int  # a later stop for the rule, the run stopped after it
    passed: int  # the run's final verdict
    success: int
    incomplete: int
    outcome_ok: int  # outcomes of the run, once per outcome source
    outcome_failed: int


@dataclass(frozen=True)
class ActionFigures:
    asked: int
    followed_up: int
    late: int
    success: int
    complete: int
    fixed: int
    mean_score_change: float | None  # over the follow-ups within the window
    mean_seconds: float | None
    runs: int = 0  # ran_to_end: the iterative runs never told they may stop
    rounds_saved: int = 0  # early_stop: rounds not run by the runs that stopped
    mean_score: float | None = None  # early_stop: of the runs that stopped; ran_to_end: all

    @property
    def followed_up_share(self) -> float | None:
        return self.followed_up / self.asked if self.asked else None


@dataclass
class ActionTally:
    counts: Counter[ActionCell] = field(default_factory=Counter)

    def add(self, amounts: Iterable[tuple[str, int]], times: int = 1) -> None:
        for key, n in amounts:
            cell = ActionCell.of_key(key)
            self.counts[cell] += n * times
            if self.counts[cell] == 0:
                del self.counts[cell]

    def merge(self, other: ActionTally) -> None:
        self.counts.update(other.counts)

    def figures(self) -> dict[tuple[str, str], ActionFigures]:
        """(agent, action) -> its figures, for every pair with a count (steers apart:
        `steer_figures`)."""
        found: dict[tuple[str, str], ActionFigures] = {}
        pairs = {(c.agent, c.action) for c in self.counts if steer_rule(c.action) is None}
        for agent, action in sorted(pairs):

            def n(name: str, agent: str = agent, action: str = action) -> int:
                return self.counts.get(ActionCell(agent, action, name), 0)

            done = n("followed_up")
            scored = done if action == EARLY_STOP else n("runs")
            found[(agent, action)] = ActionFigures(
                asked=n("asked"),
                followed_up=n("followed_up"),
                late=n("late"),
                success=n("success"),
                complete=n("complete"),
                fixed=n("fixed"),
                mean_score_change=n("score_change") / done if done else None,
                mean_seconds=n("seconds") / done if done else None,
                runs=n("runs"),
                rounds_saved=n("rounds_saved"),
                mean_score=n("score") / scored if scored else None,
            )
        return found

    def steer_figures(self) -> dict[tuple[str, str], SteerFigures]:
        """(agent, loop rule) -> what came of its steers, for every pair with a count."""
        found: dict[tuple[str, str], SteerFigures] = {}
        for agent, action in sorted({(c.agent, c.action) for c in self.counts}):
            rule = steer_rule(action)
            if rule is not None:
                n = {k: self.counts.get(ActionCell(agent, action, k), 0) for k in STEER_COUNTS}
                found[(agent, rule)] = SteerFigures(**n)
        return found
