"""The final answer held against the trace and the conversation.

Each finding makes the request incomplete and names the work left; the return value caps
completeness. Pure: no I/O, the same window always gives the same findings.
"""

from __future__ import annotations

from tracejudge.judges.conversation import pending_action, unmet_confirmation
from tracejudge.judges.outcomes import (
    admitted_failure,
    claimed_actions,
    handoff,
    is_placeholder,
    performs,
    reads_only,
)
from tracejudge.models.window import Window


def answer_outcome(
    window: Window, remaining: list[str], reasons: list[str], findings: list[tuple[str, str]]
) -> int:
    """The final answer against the trace: actions it announces that no successful tool
    call performed, an attempt it admits failed, a hand-off to a human, a placeholder.
    Each makes the request incomplete; the return value caps completeness."""
    if window.final is None:
        return 100
    output = window.final.output
    cap = 100
    if is_placeholder(output):
        findings.append(("placeholder_answer", output.strip()[:80] or "(empty)"))
        reasons.append(f"the final answer is a placeholder ('{output.strip()[:40]}')")
        remaining.append("give the user the actual result")
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
            f"the answer says '{claim.evidence[:120]}' but no successful tool call "
            f"did it ({claim.family})"
        )
        remaining.append(f"actually {claim.family}: {claim.evidence[:120]}")
        cap = min(cap, 40)
    admitted = admitted_failure(output)
    if admitted:
        findings.append(("admitted_failure", admitted))
        reasons.append(f"the answer admits an attempt failed ('{admitted[:120]}')")
        remaining.append(admitted)
        cap = min(cap, 50)
    pending = pending_action(output)
    if pending:
        findings.append(("pending_action", pending))
        reasons.append(f"the answer leaves the action pending ('{pending[:120]}')")
        remaining.append(f"carry out what the answer leaves pending: {pending[:120]}")
        cap = min(cap, 50)
    confirmed = unmet_confirmation(window)
    if confirmed:
        findings.append(("confirmed_not_done", confirmed))
        reasons.append(
            f"the user confirmed ('{confirmed[:120]}') but no state-changing call succeeded after"
        )
        remaining.append(f"do what the user confirmed: {confirmed[:120]}")
        cap = min(cap, 40)
    handed = handoff(output)
    if handed:
        findings.append(("handoff", handed))
        reasons.append(f"the request was handed to a human ('{handed[:120]}')")
        remaining.append(f"resolve what was handed off: {handed[:120]}")
        cap = min(cap, 50)
    return cap
