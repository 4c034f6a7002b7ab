"""The final answer held against the trace and the conversation.

Each finding makes the request incomplete and names the work left; the return value caps
completeness. Pure: no I/O, the same window always gives the same findings.
"""

from __future__ import annotations

from tracejudge.judges.masking.clipping import quote_whole
from tracejudge.judges.rules.claims import (
    admitted_failure,
    claimed_actions,
    handoff,
    is_placeholder,
    performs,
    reads_only,
)
from tracejudge.judges.rules.conversation import pending_action, unmet_confirmation
from tracejudge.judges.rules.remaining import pending
from tracejudge.judges.text.kinds import split
from tracejudge.models.outputs import RemainingStep
from tracejudge.models.window import Window

# "Submitted patch:", "Here is the result:" and nothing after: an empty submission
_ANNOUNCE_MAX = 40


def answer_outcome(
    window: Window,
    remaining: list[RemainingStep],
    reasons: list[str],
    findings: list[tuple[str, str]],
) -> int:
    """The final answer against the trace: actions it announces that no successful tool
    call performed, an attempt it admits failed, a hand-off to a human, a placeholder.
    Each makes the request incomplete; the return value caps completeness."""
    if window.final is None:
        return 100
    text = split(window.final.output)
    # the claim rules read what the agent says, not the patch, code or log it hands over
    output = text.prose
    cap = 100
    if not text.artifact and (is_placeholder(output) or _announces_nothing(output)):
        findings.append(("placeholder_answer", quote_whole(output.strip(), 80) or "(empty)"))
        reasons.append(f"the final answer is a placeholder ('{quote_whole(output.strip(), 40)}')")
        remaining.append(
            pending(
                "give the user the actual result",
                f"the final answer is a placeholder ('{quote_whole(output.strip(), 40)}')",
            )
        )
        return 10
    calls = window.tool_calls
    # A tool often does more than its name says (a booking charges the card and mails the
    # receipt), so a claim is held against the trace only when it is plainly not backed:
    # every call that could have done it failed, or nothing but look-ups succeeded at all.
    acting = [c for c in calls if c.success and not reads_only(c.tool)]
    for claim in claimed_actions(output):
        attempts = [c for c in calls if performs(c.tool, claim.family)]
        if attempts and any(c.success for c in attempts):
            continue
        if not attempts and acting:
            continue
        findings.append(("claim_without_call", claim.evidence))
        reasons.append(
            f"the answer says '{quote_whole(claim.evidence, 120)}' but no successful tool call "
            f"did it ({claim.family})"
        )
        remaining.append(
            RemainingStep(
                kind="claimed_not_done",
                step=claim.family,
                why=f"the answer says '{quote_whole(claim.evidence, 120)}' but no successful "
                "tool call did it",
            )
        )
        cap = min(cap, 40)
    # (rule, evidence, why, (kind, work left), completeness cap): each makes the request
    # incomplete; `why` says what the work left is about
    checks = (
        (
            "admitted_failure",
            admitted_failure(output),
            "the answer admits an attempt failed ('{short}')",
            ("request_pending", "finish the user's request"),
            50,
        ),
        (
            "pending_action",
            pending_action(output),
            "the answer leaves the action pending ('{short}')",
            ("request_pending", "carry out what the answer leaves pending"),
            50,
        ),
        (
            "confirmed_not_done",
            unmet_confirmation(window),
            "the user confirmed ('{short}') but no state-changing call succeeded after",
            ("confirmed_not_done", "do what the user confirmed"),
            40,
        ),
        (
            "handoff",
            handoff(output),
            "the request was handed to a human ('{short}')",
            ("request_pending", "resolve what was handed to a human"),
            50,
        ),
    )
    for rule, evidence, why, left, limit in checks:
        if evidence:
            findings.append((rule, evidence))
            short = quote_whole(evidence, 120)
            reasons.append(why.format(short=short))
            kind, step = left
            remaining.append(RemainingStep(kind=kind, step=step, why=why.format(short=short)))
            cap = min(cap, limit)
    return cap


def _announces_nothing(text: str) -> bool:
    stripped = text.strip()
    return len(stripped) <= _ANNOUNCE_MAX and stripped.endswith((":", "："))
