"""Kinds of process trouble in a run: each common alone in runs that end well, telling together.

A run that changed state without the user's go-ahead, had tool calls fail, repeated identical
calls, ran a long tool chain or needed a long back-and-forth is not wrong for any one of these;
two or more kinds in one run put it below the warn threshold (see RuleJudge).
"""

from __future__ import annotations

from tracejudge.models.window import Window

LONG_CHAIN = 10  # tool calls: twice the short chain that costs no efficiency
LONG_EXCHANGE = 8  # user turns


def trouble_kinds(window: Window, unconfirmed: list[str]) -> list[str]:
    """Independent kinds of process trouble, each with its evidence. One alone is common in
    runs that end well; two together mark a run that deserves a look (on tau-bench two or
    more come in 3 of 10 failed runs and 1 in 10 successful ones)."""
    calls = window.tool_calls
    kinds: list[str] = []
    if unconfirmed:
        kinds.append(f"changed state without a go-ahead ({unconfirmed[0][:80]})")
    failed = [c for c in calls if not c.success]
    if failed:
        kinds.append(
            f"{len(failed)} failed tool call(s) ({failed[0].tool}: {(failed[0].error or '')[:60]})"
        )
    signatures = [(c.tool, c.args_summary) for c in calls if c.args_summary is not None]
    if len(signatures) != len(set(signatures)):
        kinds.append("identical tool calls repeated")
    if len(calls) >= LONG_CHAIN:
        kinds.append(f"a long tool chain ({len(calls)} calls)")
    if len(window.user_turns) >= LONG_EXCHANGE:
        kinds.append(f"a long back-and-forth ({len(window.user_turns)} user turns)")
    return kinds
