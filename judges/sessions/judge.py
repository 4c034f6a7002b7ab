"""A session's verdict from its turns: the conversation read as one run, beside each turn's own.

- **The conversation** (judges/sessions/assemble.py): the turns' steps in order, the user's
  messages between them, the last answer the agent gave as its answer. The rules read it as
  they read a request: a failed step made good in a later turn is made good; a state change
  the user never agreed to, work left pending, an answer admitting failure count against it.
- **The turns' verdicts**: each request was judged when it closed, with what is normal for its
  agent (efficiency against its own runs), which the conversation alone cannot know.
- **What only a conversation shows**: a user asking again for what an earlier turn should have
  done (a repeat or a rephrasing), and turns left failed that no later turn took up.

The score blends the conversation's rules with the mean of its turns' scores, less the repeats;
`success` is the conversation's (every failed step made good by the end), `incomplete` is the
conversation's as of its last turn. Pure: the same turns, the same verdict.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tracejudge.judges.checks.apply import Checked, with_checks
from tracejudge.judges.rules.judge import TROUBLED_CAP, RuleJudge, RuleVerdict
from tracejudge.judges.sessions.assemble import Origins, assembled
from tracejudge.models.outputs import Finding
from tracejudge.models.sessions import SessionBlame, SessionTurn, TurnVerdict
from tracejudge.models.window import Window

# the conversation's rules against its turns' own verdicts: the turns carry the agent's normal,
# the conversation what no single turn shows (BENCHMARKS.md: Sessions)
CONVERSATION_WEIGHT = 0.5
REPEAT_PENALTY = 4.0  # points per turn asking again for what an earlier one asked
MAX_REPEAT_PENALTY = 20.0
# a turn asks again when most of its words were in an earlier turn's request
REPEAT_OVERLAP = 0.6
REPEAT_MIN_WORDS = 4
REPEAT_LOOKBACK = 20  # earlier turns a turn is compared with: linear in a long session
GOAL_SHOWN = 160
_WORD = re.compile(r"[a-z0-9]{3,}")
_COMMON = frozenset(
    [
        "the",
        "and",
        "you",
        "your",
        "for",
        "with",
        "that",
        "this",
        "have",
        "can",
        "please",
        "want",
        "would",
        "like",
        "need",
        "could",
        "what",
        "how",
        "are",
        "was",
        "were",
        "there",
        "just",
        "also",
        "about",
        "from",
        "not",
        "but",
        "will",
        "thanks",
        "thank",
    ]
)


@dataclass(frozen=True)
class SessionJudgment:
    exact: float  # 0-100, before rounding
    failed_check: bool  # a team's session check failed it: below the threshold whatever else
    success: bool
    incomplete: bool
    turns: list[TurnVerdict]
    summary: str
    reasons: list[str]
    findings: list[Finding]
    blame: SessionBlame | None
    unanswered_request_id: str | None


def _goal(turn: SessionTurn) -> str:
    for event in turn.events:
        if event.get("type") == "task_started":
            return str(event.get("goal") or "")
    return ""


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _COMMON)


def repeats(goals: Sequence[str]) -> dict[int, int]:
    """Turn index -> the earlier turn it asks again (0-based): most of its words were there,
    among the REPEAT_LOOKBACK turns before it."""
    found: dict[int, int] = {}
    seen = [_words(goal) for goal in goals]
    for n, words in enumerate(seen):
        earlier = range(max(0, n - REPEAT_LOOKBACK), n)
        m = next((m for m in earlier if _same_ask(words, seen[m])), None)
        if m is not None:
            found[n] = m
    return found


def _same_ask(words: frozenset[str], earlier: frozenset[str]) -> bool:
    if min(len(words), len(earlier)) < REPEAT_MIN_WORDS:
        return False
    return len(words & earlier) >= REPEAT_OVERLAP * min(len(words), len(earlier))


def conversation_of(session_key: str, turns: Sequence[SessionTurn]) -> tuple[Window, Origins]:
    """The session's conversation as one run, and where each of its steps came from."""
    return assembled(session_key, [t.events for t in turns])


def judge_session(
    session_key: str,
    turns: Sequence[SessionTurn],
    rules: RuleJudge | None = None,
    *,
    conversation: tuple[Window, Origins] | None = None,
    checked: Checked | None = None,
) -> SessionJudgment:
    """`turns` in the order they were asked (their `opened_at`), at least one.
    `conversation`: `conversation_of(...)` when the caller built it (to run the team's session
    checks on it); `checked`: what those checks found, folded in as for a request."""
    rules = rules or RuleJudge()
    window, origins = conversation or conversation_of(session_key, turns)
    verdict = rules.judge(window)
    if checked is not None:
        verdict = with_checks(verdict, checked)
    goals = [_goal(t) for t in turns]
    asked_again = repeats(goals)
    as_one = verdict.rule_exact if verdict.rule_exact is not None else verdict.rule_score
    turn_mean = sum(t.overall_exact or t.overall_score for t in turns) / len(turns)
    # asking again counts against the conversation where what was asked first was not done
    # (that turn failed or was left incomplete): restating one's details to a new question is
    # not a complaint
    unmet = [n for n, m in asked_again.items() if turns[m].incomplete or not turns[m].success]
    penalty = min(MAX_REPEAT_PENALTY, REPEAT_PENALTY * len(unmet))
    exact = CONVERSATION_WEIGHT * as_one + (1 - CONVERSATION_WEIGHT) * turn_mean - penalty
    exact = max(0.0, min(100.0, exact))
    if verdict.failed_checks:  # the team's own session check failed it: as for a request
        exact = min(exact, TROUBLED_CAP)
    findings = [Finding(rule=rule, evidence=evidence) for rule, evidence in verdict.findings]
    for rule, message, step in verdict.check_findings:
        # a session check's step is the conversation's: said as its turn and the step in it
        turn_step = origins.get(step) if step is not None else None
        if turn_step is not None:
            message, step = f"turn {turn_step[0] + 1}: {message}", turn_step[1]
        version = verdict.check_versions.get(rule)
        findings.append(Finding(rule=rule, evidence=message, version=version, step=step))
    reasons = list(verdict.reasons)
    for n, m in sorted(asked_again.items()):
        findings.append(
            Finding(rule="asked_again", evidence=f"turn {n + 1} asks again what turn {m + 1} asked")
        )
    if asked_again:
        reasons.append(
            f"the user asked again in {len(asked_again)} turn(s): what they asked before was "
            "not done"
        )
    handed = [n for n, t in enumerate(turns) if _handed_off(t)]
    if handed:
        findings.append(
            Finding(rule="handed_off", evidence=", ".join(f"turn {n + 1}" for n in handed[:5]))
        )
        reasons.append(f"handed off in turn {handed[0] + 1}")
    vague = [n for n, t in enumerate(turns) if "placeholder_answer" in t.findings]
    if vague:
        findings.append(
            Finding(
                rule="answered_generically",
                evidence=", ".join(f"turn {n + 1}" for n in vague[:5]),
            )
        )
    left = [n for n, t in enumerate(turns[:-1]) if not t.success or t.incomplete]
    left = [n for n in left if n not in asked_again.values()]  # taken up again, not left
    if left and verdict.incomplete:
        findings.append(
            Finding(
                rule="turn_left_undone",
                evidence=", ".join(f"turn {n + 1} ({turns[n].request_id})" for n in left[:5]),
            )
        )
    listed = [
        TurnVerdict(
            turn=n + 1,
            request_id=t.request_id,
            overall_score=t.overall_score,
            passed=t.passed,
            success=t.success,
            incomplete=t.incomplete,
            goal=goals[n][:GOAL_SHOWN] or None,
            repeats=None if n not in asked_again else asked_again[n] + 1,
        )
        for n, t in enumerate(turns)
    ]
    left_undone = unanswered(turns) if verdict.incomplete else None
    never_made_good = _never_made_good(turns)
    if never_made_good:
        reasons.append(
            "failed in a turn and never made good in a later one: "
            + ", ".join(f"{tool} (turn {n + 1})" for n, tool in never_made_good[:5])
        )
    return SessionJudgment(
        exact=exact,
        failed_check=verdict.failed_checks > 0,
        success=verdict.success and not never_made_good,
        incomplete=verdict.incomplete,
        turns=listed,
        summary=f"{len(turns)} turn(s): {verdict.summary}",
        reasons=reasons,
        findings=findings,
        blame=_blame(verdict, origins, turns),
        unanswered_request_id=left_undone,
    )


_HANDOFF = re.compile(r"transfer|hand_?off|escalat", re.IGNORECASE)


def _handed_off(turn: SessionTurn) -> bool:
    """A call that hands the conversation to someone else (a person, another agent): named so
    by the frameworks' hand-off tools (`transfer_to_<agent>`, `handoff`, `escalate`)."""
    return any(
        e.get("type") == "tool_call" and _HANDOFF.search(str(e.get("tool"))[:256])
        for e in turn.events
    )


def _never_made_good(turns: Sequence[SessionTurn]) -> list[tuple[int, str]]:
    """(turn, tool) of each failed call that no later call of the same tool made good, in a
    turn whose own verdict counted a failure (`success` false). The conversation's rules take
    any later call that worked as recovery, as they do within a run; across turns, a later
    look-up is not the refund that failed."""
    last_ok: dict[str, tuple[int, int]] = {}  # tool -> (turn, position) of its last success
    failed: list[tuple[int, int, str]] = []
    for n, turn in enumerate(turns):
        for at, event in enumerate(turn.events):
            if event.get("type") != "tool_call":
                continue
            tool = str(event.get("tool"))
            if event.get("success"):
                last_ok[tool] = (n, at)
            elif not turn.success:
                failed.append((n, at, tool))
    return [(n, tool) for n, at, tool in failed if last_ok.get(tool, (-1, -1)) < (n, at)]


def unanswered(turns: Sequence[SessionTurn]) -> str:
    """The request the conversation left undone: the last turn that was itself incomplete or
    failed, else the last turn (the conversation as a whole is what is undone)."""
    for turn in reversed(turns):
        if turn.incomplete or not turn.success:
            return turn.request_id
    return turns[-1].request_id


def _blame(
    verdict: RuleVerdict, origins: Origins, turns: Sequence[SessionTurn]
) -> SessionBlame | None:
    blame = verdict.blame
    if blame is None:
        return None
    if blame.abstain or blame.step_index is None or blame.step_index not in origins:
        return SessionBlame(reason=blame.reason)
    turn, step = origins[blame.step_index]
    return SessionBlame(
        turn=turn + 1,
        request_id=turns[turn].request_id,
        step_index=step,
        actor=blame.actor,
        reason=blame.reason,
    )
