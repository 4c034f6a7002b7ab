"""Rule judge: completeness, execution health and efficiency, and rule-derived verdicts.

Pure and deterministic: the same window always gets the same verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from tracejudge.judges.answer_checks import answer_outcome
from tracejudge.judges.conversation import is_conversation, unconfirmed_changes
from tracejudge.judges.generic import assess_answer
from tracejudge.judges.phrases import REMAINING_WORK_RE, first_match
from tracejudge.judges.trouble import trouble_kinds
from tracejudge.models.outputs import FailedStep
from tracejudge.models.window import Window

RULES_VERSION = "rules-2"
# A request the rules find failed or incomplete never scores above this: scores must separate.
FLAGGED_CAP = 79
# Two kinds of process trouble in one run (see _troubles) put it below the default warn threshold.
TROUBLE_KINDS_TO_FAIL = 2
TROUBLED_CAP = 55
TROUBLE_COST = 6
UNCONFIRMED_COST = 20
UNCONFIRMED_COST_MAX = 40
SHORT_OUTPUT = 15
BRIEF_OUTPUT = 60


@dataclass(frozen=True)
class RuleWeights:
    completeness: float = 0.45
    execution_health: float = 0.35
    efficiency: float = 0.20


class RuleVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    completeness: int
    execution_health: int
    efficiency: int
    rule_score: int
    success: bool
    incomplete: bool
    failed_steps: list[FailedStep]
    remaining_steps: list[str]
    summary: str
    reasons: list[str] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list)
    # (rule, evidence) for every rule that fired: what the benchmark counts per rule
    findings: list[tuple[str, str]] = Field(default_factory=list)


def _clamp(value: float) -> int:
    return max(0, min(100, round(value)))


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z\u4e00-\u9fff]+", " ", text.lower()).split())


def _sentence_around(text: str, snippet: str, limit: int = 200) -> str:
    at = text.lower().find(snippet.lower())
    if at < 0:
        return snippet
    start = max(text.rfind(".", 0, at), text.rfind("\n", 0, at), text.rfind("。", 0, at)) + 1
    ends = [i for i in (text.find(c, at) for c in ".\n。") if i >= 0]
    end = min(ends) + 1 if ends else len(text)
    return text[start:end].strip()[:limit]


DEFAULT_TOOL_CALL_BUDGET = 25
SHORT_CHAIN = 5  # tool calls that cost no efficiency
SHORT_EXCHANGE = 3  # user turns after the first that cost no efficiency


class RuleJudge:
    """Scores a closed window by rules alone."""

    version = RULES_VERSION

    def __init__(
        self,
        *,
        tool_call_budget: int = DEFAULT_TOOL_CALL_BUDGET,
        weights: RuleWeights | None = None,
    ) -> None:
        self.tool_call_budget = tool_call_budget
        self.weights = weights or RuleWeights()

    def judge(self, window: Window) -> RuleVerdict:
        reasons: list[str] = []
        suggestions: list[str] = []
        findings: list[tuple[str, str]] = []
        failed = self._unrecovered_failures(window)
        missing = self._missing_planned(window)
        remaining = list(missing)
        if missing:
            findings.append(("planned_step_not_attempted", ", ".join(missing[:5])))
        completeness = self._completeness(
            window, missing, remaining, reasons, suggestions, findings
        )
        completeness = min(completeness, answer_outcome(window, remaining, reasons, findings))
        health = self._health(window, failed, reasons, suggestions)
        unconfirmed = unconfirmed_changes(window)
        if unconfirmed:
            # acting on a choice or a question instead of a yes: how agents act on a wrong
            # reading of the request (tau-bench: 21% of failed runs, 6% of successful ones)
            findings.append(("change_without_go_ahead", "; ".join(unconfirmed[:3])))
            reasons.append(
                f"{len(unconfirmed)} state change(s) made without the user's explicit go-ahead"
            )
            suggestions.append("read the change back and wait for the user's yes before acting")
            health = _clamp(health - min(UNCONFIRMED_COST_MAX, UNCONFIRMED_COST * len(unconfirmed)))
        efficiency = self._efficiency(window, reasons, suggestions)
        w = self.weights
        rule_score = _clamp(
            w.completeness * completeness + w.execution_health * health + w.efficiency * efficiency
        )
        blocked = (
            window.final is not None
            and window.final.validation is not None
            and (window.final.validation.verdict == "block")
        )
        success = not failed and not blocked
        incomplete = window.final is None or bool(remaining)
        if failed:
            findings.append(("unrecovered_failure", "; ".join(f.reason for f in failed[:3])))
        if not success or incomplete:
            rule_score = min(rule_score, FLAGGED_CAP)
        troubles = trouble_kinds(window, unconfirmed)
        rule_score = _clamp(rule_score - TROUBLE_COST * len(troubles))
        if len(troubles) >= TROUBLE_KINDS_TO_FAIL:
            findings.append(("compound_trouble", "; ".join(troubles)))
            reasons.append("several kinds of trouble in one run: " + "; ".join(troubles))
            rule_score = min(rule_score, TROUBLED_CAP)
        return RuleVerdict(
            completeness=completeness,
            execution_health=health,
            efficiency=efficiency,
            rule_score=rule_score,
            success=success,
            incomplete=incomplete,
            failed_steps=failed,
            remaining_steps=remaining,
            summary=self._summary(window, failed, remaining, blocked),
            reasons=reasons,
            suggestions=suggestions,
            findings=findings,
        )

    @staticmethod
    def _unrecovered_failures(window: Window) -> list[FailedStep]:
        calls = window.tool_calls
        failed: list[FailedStep] = []
        for i, call in enumerate(calls):
            if call.success:
                continue
            redone = any(later.tool == call.tool and later.success for later in calls[i + 1 :])
            if not redone:
                reason = call.error or "tool reported failure"
                failed.append(FailedStep(index=call.step_index, tool=call.tool, reason=reason))
        return failed

    @staticmethod
    def _missing_planned(window: Window) -> list[str]:
        if window.task is None or not window.task.planned_steps:
            return []
        # attempted counts as executed: whether it succeeded is `success`'s business, and a step
        # that ran and failed is not work left undone (the seed's fourth quadrant)
        done_tools = {_norm(c.tool) for c in window.tool_calls}
        done_actions = {_norm(r.action) for r in window.reasoning if r.action}
        missing = []
        for planned in window.task.planned_steps:
            p = _norm(planned)
            executed = p in done_actions or any(
                t and (t == p or t in p or p in t) for t in done_tools
            )
            if not executed:
                missing.append(planned)
        return missing

    def _completeness(
        self,
        window: Window,
        missing: list[str],
        remaining: list[str],
        reasons: list[str],
        suggestions: list[str],
        findings: list[tuple[str, str]],
    ) -> int:
        if window.final is None:
            findings.append(("no_final_response", window.closed_by))
            why = "idle timeout" if window.closed_by == "idle_timeout" else "no terminal event"
            reasons.append(f"no final response ({why})")
            suggestions.append("make the agent publish a final_response when it finishes")
            remaining.append("produce a final response for the user")
            return 0
        score = 100.0
        output = window.final.output.strip()
        if len(output) < SHORT_OUTPUT:
            score -= 50
            reasons.append(f"final output is very short ({len(output)} characters)")
        elif len(output) < BRIEF_OUTPUT:
            score -= 15
            reasons.append(f"final output is brief ({len(output)} characters)")
        # Same classifier as the retry stream: filler, or a question where work was asked
        # for, is not a result (a clarifying question to a vague goal is).
        answer = assess_answer(window.task.goal if window.task else "", output)
        # the last message of a conversation may close it ("You're welcome! Safe travels."):
        # the work is in the turns before it, which the other rules read
        closing = answer.classification.response_type == "generic" and is_conversation(window)
        if answer.retry and not closing:
            kind = answer.classification.response_type
            pattern = answer.classification.detected_pattern
            score -= 60
            reasons.append(
                f"final output is {kind}, not a result" + (f" ('{pattern}')" if pattern else "")
            )
            remaining.append(
                "answer the user's request instead of "
                + ("a stock phrase" if kind == "generic" else "only asking for clarification")
            )
            suggestions.append("answer with the result of the task, not filler or a question")
            findings.append((f"{kind}_answer", output[:120]))
        left = first_match(output, REMAINING_WORK_RE)
        if left:
            score -= 30
            remaining.append(_sentence_around(output, left))
            findings.append(("says_work_remains", _sentence_around(output, left)))
            reasons.append(f"final output says work remains ('{left}')")
            suggestions.append("finish the remaining work before answering")
        if missing and window.task is not None:
            ratio = len(missing) / len(window.task.planned_steps)
            score -= 50 * ratio
            reasons.append(
                f"{len(missing)} of {len(window.task.planned_steps)} planned steps not executed"
            )
            suggestions.append("run the planned steps still missing: " + ", ".join(missing[:5]))
        return _clamp(score)

    @staticmethod
    def _health(
        window: Window, failed: list[FailedStep], reasons: list[str], suggestions: list[str]
    ) -> int:
        score = 100.0
        calls = window.tool_calls
        n_failed = sum(1 for c in calls if not c.success)
        if calls and n_failed:
            unrecovered = len(failed)
            recovered = n_failed - unrecovered
            # each failure costs on its own as well: a redone failure is still a sign of
            # trouble (on tau-bench, runs with one fail twice as often), however long the run
            score -= 70 * unrecovered / len(calls) + 25 * recovered / len(calls)
            score -= min(24, 8 * n_failed)
            if unrecovered:
                score -= 15
                tools = ", ".join(sorted({f.tool or "?" for f in failed}))
                reasons.append(f"{unrecovered} tool call(s) failed and were not redone ({tools})")
                suggestions.append(f"retry or replace the failed tool call(s): {tools}")
            if recovered:
                reasons.append(f"{recovered} tool call(s) failed but were redone successfully")
        step_errors = sum(1 for r in window.reasoning if r.error) + sum(
            1 for it in window.iterations if it.exec_success is False
        )
        if step_errors:
            score -= min(20, 5 * step_errors)
            reasons.append(f"{step_errors} reasoning or iteration step(s) reported an error")
        validation = window.final.validation if window.final else None
        if validation is not None and validation.verdict == "warn":
            score -= 15
            reasons.append("validator warned: " + "; ".join(validation.reasons[:3]))
        elif validation is not None and validation.verdict == "block":
            score = min(score, 20)
            reasons.append("validator blocked the output: " + "; ".join(validation.reasons[:3]))
            suggestions.append("fix what the validator blocked before answering")
        return _clamp(score)

    def _efficiency(self, window: Window, reasons: list[str], suggestions: list[str]) -> int:
        score = 100.0
        calls = window.tool_calls
        if len(calls) > self.tool_call_budget:
            over = len(calls) - self.tool_call_budget
            score -= min(50, 3 * over)
            reasons.append(f"{len(calls)} tool calls, {over} over the budget")
        # Friction, below the budget too: each call beyond a short chain and each user turn
        # beyond a short exchange costs a little. Long chains and long back-and-forths go with
        # failure (tau-bench AUC of the call count alone: 0.66); small enough never to fail a
        # run by themselves.
        extra_calls = max(0, len(calls) - SHORT_CHAIN)
        extra_turns = max(0, len(window.user_turns) - SHORT_EXCHANGE)
        if extra_calls or extra_turns:
            score -= min(25, 2 * extra_calls + 3 * extra_turns)
        seen: set[tuple[str, str]] = set()
        repeats = 0
        for call in calls:
            if call.args_summary is None:
                continue
            signature = (call.tool, call.args_summary)
            if signature in seen:
                repeats += 1
            seen.add(signature)
        if repeats:
            score -= min(40, 8 * repeats)
            reasons.append(f"{repeats} repeated identical tool call(s)")
            suggestions.append("reuse earlier tool results instead of repeating identical calls")
        rounds = [r.iteration for r in window.iterations]
        stops = [(a, i) for a, i in window.early_stops if a in ("stop", "finalize")]
        if rounds and stops:
            action, at = stops[0]
            extra = max(rounds) - at - (1 if action == "finalize" else 0)
            if extra > 0:
                score -= min(30, 10 * extra)
                reasons.append(
                    f"ran {extra} round(s) after tracejudge said it could {action} "
                    f"at iteration {at}"
                )
                suggestions.append("check tracejudge:control:{request_id} between rounds")
        if window.steps_dropped:
            score -= 10
            reasons.append(f"trace exceeded the step limit; {window.steps_dropped} steps dropped")
        return _clamp(score)

    @staticmethod
    def _summary(
        window: Window, failed: list[FailedStep], remaining: list[str], blocked: bool
    ) -> str:
        calls = window.tool_calls
        parts = [f"{len(calls)} tool call(s)"]
        if failed:
            parts.append(f"{len(failed)} unrecovered failure(s)")
        if blocked:
            parts.append("output blocked by validator")
        if window.final is None:
            parts.append(f"no final response (closed by {window.closed_by})")
        else:
            parts.append("final response present")
        if remaining:
            parts.append(f"{len(remaining)} item(s) of work remaining")
        return "; ".join(parts)
