"""Signs of how a run ended that hold for any agent: stopped at a limit, ended on an error, the
last of several attempts failed, a final claim the last result contradicts.

None needs a number tuned to one kind of agent: each reads what happened at the end of the
run, where an agent that finished and one that gave up or was cut off differ whatever their
domain. Each returns the evidence it read, or None.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tracejudge.judges.masking.clipping import head_whole, quote_whole
from tracejudge.judges.text.kinds import prose
from tracejudge.models.events import ReasoningStep, ToolCall, UserMessage
from tracejudge.models.window import Window

# How agent harnesses say they stopped a run at a limit rather than the agent finishing it:
# SWE-agent (exit_cost, exit_context, exit_format), LangChain ("Agent stopped due to iteration
# limit or time limit"), LangGraph (GraphRecursionError: "Recursion limit of 25 reached"), the
# OpenAI Agents SDK (MaxTurnsExceeded: "Max turns (10) exceeded"), smolagents ("Reached max
# steps"), CrewAI and AutoGen (maximum iterations / turns), and model APIs (context length,
# max tokens, rate or budget limits).
LIMIT = re.compile(
    r"\bexit_(?:cost|context|format|error|forfeit|max_steps)\b"
    r"|\b(?:cost|budget|spend(?:ing)?|token|step|iteration|turn|recursion|time|call)s? limit"
    r"(?: of \d+)? (?:was |has been )?(?:reached|exceeded|hit)\b"
    r"|\b(?:reached|exceeded|hit) (?:the |its )?(?:max(?:imum)?|limit)(?: number of)?"
    r"(?: (?:steps|iterations|turns|tokens|calls|cost|budget|retries|attempts))?\b"
    r"|\bmax(?:imum)? (?:steps|iterations|turns|tokens|retries|attempts)(?: \(\d+\))? "
    r"(?:reached|exceeded|hit)\b"
    r"|\bMaxTurnsExceeded\b|\bGraphRecursionError\b|\bRecursionError\b"
    r"|\bcontext[_ ](?:length|window)[_ ]exceeded\b|\bContextWindowExceeded\w*\b"
    r"|\bagent stopped due to (?:iteration|time|max)\b|\bstopped at the (?:\w+ )?limit\b"
    r"|达到(?:最大|上限)|超出(?:上限|限制)",
    re.IGNORECASE,
)
# A claim that the work succeeded, in the agent's final words.
_SUCCESS_CLAIM = re.compile(
    r"\b(?:all |the )?tests? (?:now )?(?:pass(?:es|ed)?|succeed(?:s|ed)?|(?:are|is) (?:now )?"
    r"(?:passing|green))\b|\b(?:build|compil(?:ation|es)) (?:now )?(?:succeed|pass|works)"
    r"|\b(?:issue|bug|problem|error) (?:has been|is now|is) (?:fixed|resolved|solved)\b"
    r"|\b(?:now )?works (?:as expected|correctly|fine)\b|\bran successfully\b"
    r"|测试(?:全部)?通过|问题已(?:经)?(?:修复|解决)",
    re.IGNORECASE,
)
# negated, conditional or hoped for: "to see if the issue has been resolved" claims nothing
_HEDGED = re.compile(
    r"\b(?:not|n't|no longer|never|fail|if|whether|once|when|until|unless|should|would|"
    r"will|might|may|could|hope|expect|to (?:see|check|verify|confirm|ensure|make sure))\b",
    re.IGNORECASE,
)
# What a tool result reads like when it failed although the call itself "succeeded".
_FAILED_RESULT = re.compile(
    r"\b(?:FAILED|FAILURE|BUILD FAILURE|Tests? failed|\d+ failed|failures: [1-9]|errors: [1-9]|"
    r"AssertionError|Traceback \(most recent call last\)|Exception in thread|"
    r"compilation (?:error|failed)|command not found|No such file or directory)\b",
    re.IGNORECASE,
)


def limit_call(call: ToolCall) -> bool:
    """A tool call by which the harness stopped the run (SWE-agent's `exit_cost`), not one the
    agent made: it is a limit, not the agent's failure."""
    return _limit_tool(call.tool)


@lru_cache(maxsize=1024)
def _limit_tool(tool: str) -> bool:
    # a run has few distinct tool names, each read by several rules
    return LIMIT.search(tool) is not None


def stopped_at_limit(window: Window) -> str | None:
    """The run stopped at a limit (steps, cost, time, turns, context, format errors) rather than
    by finishing: said by the last steps or by the final answer."""
    tail = window.steps[-3:]
    for step in reversed(tail):
        texts: list[str | None] = []
        if isinstance(step, ToolCall):
            texts = [step.tool, step.error]
        elif isinstance(step, ReasoningStep):
            texts = [step.error]
        for text in texts:
            found = LIMIT.search(text or "")
            if found:
                return quote_whole(text or "", 200)
    if window.final is not None:
        found = LIMIT.search(prose(window.final.output)[:2000])
        if found:
            return found.group(0)
    return None


def _agent_calls(window: Window) -> list[ToolCall]:
    return [c for c in window.tool_calls if not limit_call(c)]


def ended_on_error(window: Window) -> ToolCall | None:
    """The run's last call failed, with no successful call after: the run ended on the error.
    In a conversation that went on after it (the user spoke again), the failure was told and
    talked over, not ended on: a refusal the system enforced is often the right outcome."""
    calls = _agent_calls(window)
    if not calls or calls[-1].success:
        return None
    last = calls[-1]
    if any(isinstance(s, UserMessage) and s.step_index > last.step_index for s in window.steps):
        return None
    return last


def _action(call: ToolCall) -> tuple[str, str]:
    """What a call attempts: its tool and the first word of its arguments (`bash` + `mvn`)."""
    words = (call.args_summary or "").split()
    return call.tool, words[0].lower()[:40] if words else ""


def last_attempt_failed(window: Window) -> str | None:
    """An action tried several times whose last attempt failed and never succeeded after."""
    calls = _agent_calls(window)
    last: dict[tuple[str, str], ToolCall] = {}
    tries: dict[tuple[str, str], int] = {}
    for call in calls:
        action = _action(call)
        last[action] = call
        tries[action] = tries.get(action, 0) + 1
    for action, call in last.items():
        if tries[action] >= 2 and not call.success:
            # named from the call's own words: the action is lower-cased for grouping, and a
            # secret lower-cased or cut is one the masker no longer recognises
            said = (call.args_summary or "").split()
            name = " ".join(p for p in (call.tool, head_whole(said[0], 40) if said else "") if p)
            error = quote_whole(call.error or "", 80)
            return f"{name}: {tries[action]} attempts, the last failed ({error})"
    return None


def claim_contradicts_result(window: Window) -> str | None:
    """The agent's last words claim success ("all tests pass") while the last tool result it
    had says otherwise (the call failed, or its output reads as a failure)."""
    calls = [c for c in _agent_calls(window) if not _submits(c)]
    if not calls:
        return None
    last = calls[-1]
    failed = not last.success or bool(_FAILED_RESULT.search(last.result_preview or ""))
    if not failed:
        return None
    said = [prose(window.final.output)] if window.final is not None else []
    after = [
        s.intent_summary or ""
        for s in window.steps
        if isinstance(s, ReasoningStep) and s.step_index > last.step_index
    ]
    for text in [*said, *after]:
        for sentence in re.split(r"(?<=[.!?。])\s+|\n", prose(text)):
            found = _SUCCESS_CLAIM.search(sentence)
            if found and not _HEDGED.search(sentence[: found.start()]):
                return f"'{quote_whole(sentence.strip(), 120)}' after {last.tool} failed"
    return None


def _submits(call: ToolCall) -> bool:
    return re.search(r"submit|finish|final|answer|respond", call.tool, re.IGNORECASE) is not None


_FILE_BLOCK = re.compile(r"(?m)^diff --git a/(\S+)")


def patch_adds_only(window: Window) -> str | None:
    """The submitted patch creates files and changes none that existed: asked to fix or change
    something, the agent left everything that was there as it was (typically it only added a
    script reproducing the problem)."""
    if window.final is None:
        return None
    text = window.final.output
    paths = _FILE_BLOCK.findall(text)
    if not paths:
        return None
    blocks = re.split(r"(?m)^diff --git ", text)[1:]
    if all(re.search(r"(?m)^new file mode", block.split("\n@@", 1)[0]) for block in blocks):
        return "the patch only adds " + ", ".join(paths[:4])
    return None
