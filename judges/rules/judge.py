"""Rule judge: completeness, execution health and efficiency, and rule-derived verdicts.

Pure and deterministic: the same window always gets the same verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from tracejudge.judges.answers.generic import assess_answer
from tracejudge.judges.masking.clipping import head_whole, quote_whole
from tracejudge.judges.rules.agent_norms import MEASURES, Norms, RunStats
from tracejudge.judges.rules.answer_checks import answer_outcome
from tracejudge.judges.rules.blame import actor_of, blame_of, multi_agent
from tracejudge.judges.rules.conversation import is_conversation, unconfirmed_changes
from tracejudge.judges.rules.endings import (
    claim_contradicts_result,
    ended_on_error,
    last_attempt_failed,
    limit_call,
    patch_adds_only,
    stopped_at_limit,
)
from tracejudge.judges.rules.phrases import REMAINING_WORK_RE, first_match
from tracejudge.judges.rules.plans import failed_planned_steps, names_a_tool, norm, same_step
from tracejudge.judges.rules.remaining import pending, planned_not_attempted, work_left
from tracejudge.judges.rules.stops import Stop, stop_that_ended
from tracejudge.judges.rules.trouble import relative_findings, trouble_kinds
from tracejudge.judges.text.kinds import split
from tracejudge.judges.text.sentences import sentence_at
from tracejudge.models.outputs import Blame, FailedStep, RemainingStep
from tracejudge.models.window import Window

RULES_VERSION = "rules-3"
# A request the rules find failed or incomplete never scores above this: scores must separate.
FLAGGED_CAP = 79
# Two kinds of process trouble in one run (see _troubles) put it below the default warn threshold.
TROUBLE_KINDS_TO_FAIL = 2
TROUBLED_CAP = 55
TROUBLE_COST = 6
# A run a stop intervention ended before its answer did not reach its goal: incomplete, and
# below the default warn threshold whatever else went well (judges/verdict/conclude.py keeps it
# below an agent's calibrated threshold too)
STOPPED_CAP = 55
STOPPED_COST = 50  # completeness: the answer, if any, is what the run had when it was stopped
# A run that ended by an error (its final response carries `error`: an exception out of the
# agent, a root span ended in ERROR) failed and did not reach its goal, whatever its output says
CRASHED_CAP = 55
CRASHED_COST = 50  # execution health
# A run that repeated itself (the same call in a row, or tracejudge steered it out of a loop) and
# then answered that it could not do the job: its own answer says the goal was not reached, so
# it does not pass, whatever the judge reads (judges/verdict/conclude.py)
GAVE_UP_CAP = 55
GAVE_UP = ("admitted_failure", "placeholder_answer")
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
    # the score before rounding: the pass threshold is tested on it (59.8 does not pass 60)
    rule_exact: float | None = None
    success: bool
    incomplete: bool
    failed_steps: list[FailedStep]
    remaining_steps: list[str]  # `remaining`, a line each
    remaining: list[RemainingStep] = Field(default_factory=list)
    summary: str
    reasons: list[str] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list)
    # (rule, evidence) for every rule that fired: what the benchmark counts per rule
    findings: list[tuple[str, str]] = Field(default_factory=list)
    # ("check:<name>", message, step it points at or None) for each of a team's checks' findings
    # (judges/checks/apply.py): the step is a field, never written into the message
    check_findings: list[tuple[str, str, int | None]] = Field(default_factory=list)
    # where it went wrong, or an abstention (attached to a verdict that is not a clean pass)
    blame: Blame | None = None
    # step index -> who took it (its actor, else its tool): names the judge's blamed step
    actors: dict[int, str] = Field(default_factory=dict)
    # a team's checks (judges/checks/apply.py): how many failed the run, and each one's version
    failed_checks: int = 0
    check_versions: dict[str, str] = Field(default_factory=dict)
    # the stop intervention that ended the run before its answer, in words (None: none did):
    # the run is incomplete and does not pass whatever the judge says (judges/rules/stops.py)
    stopped: str | None = None
    # the error the run ended by (its final response's `error`): a fact of the trace, so the
    # judge's verdict does not take it back (judges/verdict/conclude.py)
    crashed: str | None = None
    # the run looped and its answer says it could not do the job, in words (None: it did not):
    # incomplete and below the threshold whatever the judge says (judges/verdict/conclude.py)
    gave_up: str | None = None


def _clamp(value: float) -> int:
    return max(0, min(100, round(value)))


def _bound(value: float) -> float:
    return max(0.0, min(100.0, value))


def _sentence_around(text: str, snippet: str) -> str:
    at = text.lower().find(snippet.lower())
    return snippet if at < 0 else sentence_at(text, at)


# No absolute budget by default: how many calls is too many depends on the agent (a support
# bot answers in 3, a coding agent runs 40 commands when all is well), so a run is judged long
# only against its own agent's runs (`Norms`). A budget set explicitly is a fact and applies.
DEFAULT_TOOL_CALL_BUDGET = 0
RECOVERED_COST = 2  # a failure fixed later: how agents work, and it costs little
RECOVERED_COST_MAX = 8
ENDED_ON_ERROR_COST = 35
LAST_ATTEMPT_COST = 15
LIMIT_COST = 30  # stopped at a limit: the harness ended it, not the agent
CONTRADICTED_COST = 30
GRADED_COST = 40  # times the run's position in its agent's runs (at most 0.45), per measure
RELATIVE_MEASURES = MEASURES
ADDS_ONLY_COST = 40  # a patch that changes no existing file: a ranking signal, not an alert
LOOP_RUN = 3  # the same call this many times in a row, nothing between: a loop
LOOP_COST = 15


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

    def judge(
        self, window: Window, stats: RunStats | None = None, norms: Norms | None = None
    ) -> RuleVerdict:
        """`stats`: the run's counts over all its steps (the worker's, exact beyond the step
        limit); counted from the window when not given. `norms`: what is normal for its agent;
        nothing is judged relative to it when absent or still learning."""
        stats = stats or RunStats.of(window)
        reasons: list[str] = []
        suggestions: list[str] = []
        findings: list[tuple[str, str]] = []
        failed = self._unrecovered_failures(window)
        crash = _crash(window)
        if crash is not None:
            failed.append(crash)
        missing = self._missing_planned(window, stats)
        remaining = [planned_not_attempted(m) for m in missing]
        if missing:
            findings.append(("planned_step_not_attempted", ", ".join(missing[:5])))
        completeness = self._completeness(
            window, missing, remaining, reasons, suggestions, findings
        )
        stop = stop_that_ended(window)
        if stop is not None and stop.after_the_fact:
            # the final response is tracejudge's stop, not an answer to read; the run is judged
            # on the steps it made, the flagged call included
            _stopped(stop, reasons, suggestions, findings)
            stop = None
        else:
            completeness = min(completeness, answer_outcome(window, remaining, reasons, findings))
        if stop is not None:
            completeness = _clamp(completeness - STOPPED_COST)
            _stopped(stop, reasons, suggestions, findings)
        limit = stopped_at_limit(window)
        if limit:
            findings.append(("stopped_at_limit", limit))
            reasons.append(
                f"the run stopped at a limit, not by finishing ('{quote_whole(limit, 80)}')"
            )
            suggestions.append("find what made the run reach its limit (a loop, a dead end)")
        health = self._health(window, stats, failed, limit, reasons, suggestions, findings)
        if crash is not None:
            health = _clamp(health - CRASHED_COST)
            said = window.final.error if window.final is not None else None
            error = quote_whole(said or "", 200)
            findings.append(("run_error", error))
            reasons.append(f"the run ended with an error, not an answer ({error})")
            suggestions.append("find what raised, and let the agent answer or retry instead")
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
        relative = relative_findings(stats, norms)
        efficiency = self._efficiency(window, stats, norms, relative, reasons, suggestions)
        w = self.weights
        rule_score = _bound(
            w.completeness * completeness + w.execution_health * health + w.efficiency * efficiency
        )
        blocked = (
            window.final is not None
            and window.final.validation is not None
            and (window.final.validation.verdict == "block")
        )
        success = not failed and not blocked and not limit
        incomplete = (
            window.final is None or bool(remaining) or stop is not None or crash is not None
        )
        left = work_left(window, failed, remaining, _pending(stop, crash))
        if failed:
            findings.append(("unrecovered_failure", "; ".join(f.reason for f in failed[:3])))
        for kind, evidence in relative:
            findings.append((kind, evidence))
        if not success or incomplete:
            rule_score = min(rule_score, FLAGGED_CAP)
        troubles = trouble_kinds(unconfirmed, failed, relative)
        rule_score = _bound(rule_score - TROUBLE_COST * len(troubles))
        if crash is not None:
            rule_score = min(rule_score, CRASHED_CAP)
        if len(troubles) >= TROUBLE_KINDS_TO_FAIL:
            findings.append(("compound_trouble", "; ".join(troubles)))
            reasons.append("several kinds of trouble in one run: " + "; ".join(troubles))
            rule_score = min(rule_score, TROUBLED_CAP)
        if stop is not None:
            rule_score = min(rule_score, STOPPED_CAP)
        gave_up = None if stop is not None else _looped_then_gave_up(window, findings)
        if gave_up is not None:
            findings.append(("looped_then_gave_up", gave_up))
            reasons.append(f"the run repeated itself, then gave up ({gave_up})")
            suggestions.append("find what the repeated call was after, and re-plan there")
            rule_score = min(rule_score, GAVE_UP_CAP)
        self._notes(window, stats, norms, reasons)
        return RuleVerdict(
            completeness=completeness,
            execution_health=health,
            efficiency=efficiency,
            rule_score=round(rule_score),
            rule_exact=rule_score,
            success=success,
            incomplete=incomplete,
            failed_steps=failed,
            remaining_steps=[entry.words() for entry in left],
            remaining=left,
            summary=self._summary(window, stats, failed, left, blocked, stop, incomplete),
            reasons=reasons,
            suggestions=suggestions,
            findings=findings,
            blame=blame_of(window, failed, findings),
            actors=_actors(window),
            stopped=None if stop is None else stop.words(),
            crashed=None if crash is None else crash.reason,
            gave_up=gave_up,
        )

    @staticmethod
    def _unrecovered_failures(window: Window) -> list[FailedStep]:
        """Failures never made good. For any run, the error it ended on: its last call failed
        and nothing succeeded after. A call that failed and was followed by work that succeeded
        is how agents correct themselves when they work without a plan (a lookup that found
        nothing, a command fixed and run again): it costs a little in health, it does not make
        the run a failure. A run that declared its steps made a contract: a planned step whose
        last attempt failed is a failed step wherever it came in the run (the design's
        `success`: the executed steps succeeded), whatever succeeded after it."""
        calls = {c.step_index: c for c in failed_planned_steps(window)}
        last = ended_on_error(window)
        if last is not None:
            calls.setdefault(last.step_index, last)
        return [
            FailedStep(index=c.step_index, tool=c.tool, reason=c.error or "tool reported failure")
            for _, c in sorted(calls.items())
        ]

    @staticmethod
    def _missing_planned(window: Window, stats: RunStats) -> list[str]:
        """Planned steps not attempted. A step named as a tool (or an action) is matched by
        name; a step written as a description ("check the order status") cannot be, so the
        design's count rule decides for those: the run's attempts not matched by name cover
        the described steps in order, and those left over were not attempted."""
        if window.task is None or not window.task.planned_steps:
            return []
        # attempted counts as executed: whether it succeeded is `success`'s business, and a step
        # that ran and failed is not work left undone (the seed's fourth quadrant)
        done_tools = {norm(c.tool) for c in window.tool_calls}
        done_actions = {norm(r.action) for r in window.reasoning if r.action}
        missing, described = [], []
        matched = 0
        for planned in window.task.planned_steps:
            p = norm(planned)
            executed = p in done_actions or any(same_step(p, t) for t in done_tools)
            if executed:
                matched += 1
            elif names_a_tool(planned):
                missing.append(planned)
            else:
                described.append(planned)
        # an attempt is a tool call (all of them, beyond the step limit too) or, for agents
        # that act without tools, a reasoning step naming an action: whichever counts more,
        # since a ReAct agent reports each call both ways
        actions = sum(1 for r in window.reasoning if r.action)
        spare = max(0, max(stats.tool_calls, actions) - matched)
        missing.extend(described[spare:])
        return [p for p in window.task.planned_steps if p in missing]  # in the plan's order

    def _completeness(
        self,
        window: Window,
        missing: list[str],
        remaining: list[RemainingStep],
        reasons: list[str],
        suggestions: list[str],
        findings: list[tuple[str, str]],
    ) -> int:
        if window.final is None:
            findings.append(("no_final_response", window.closed_by))
            why = "idle timeout" if window.closed_by == "idle_timeout" else "no terminal event"
            reasons.append(f"no final response ({why})")
            suggestions.append("make the agent publish a final_response when it finishes")
            remaining.append(
                pending(
                    "answer the user's request", f"the run ended with no final response ({why})"
                )
            )
            return 0
        score = 100.0
        text = split(window.final.output)
        adds_only = patch_adds_only(window)
        if adds_only:
            findings.append(("patch_adds_only", adds_only))
            reasons.append(f"{adds_only}: no existing file was changed")
            suggestions.append("change the code the task is about, not only new scripts")
            score -= ADDS_ONLY_COST
        if text.artifact and not text.prose:
            # the answer is a patch, code, a log or JSON: what the agent made, read as such
            # (an empty one is a placeholder, see answer_checks)
            return _clamp(score - self._planned_cost(window, missing, reasons, suggestions))
        output = text.prose if text.artifact else window.final.output.strip()
        if len(output) < SHORT_OUTPUT and not text.artifact:
            score -= 50
            reasons.append(f"final output is very short ({len(output)} characters)")
        elif len(output) < BRIEF_OUTPUT and not text.artifact:
            score -= 15
            reasons.append(f"final output is brief ({len(output)} characters)")
        # Same classifier as the retry stream: filler, or a question where work was asked
        # for, is not a result (a clarifying question to a vague goal is).
        # an answer that carries a patch, code or data is substantive whatever its prose says
        # ("Submitted patch:"): the filler classifier reads prose-only answers
        answer = assess_answer(window.task.goal if window.task else "", output)
        # the last message of a conversation may close it ("You're welcome! Safe travels."):
        # the work is in the turns before it, which the other rules read
        closing = answer.classification.response_type == "generic" and is_conversation(window)
        if answer.retry and not closing and not text.artifact:
            kind = answer.classification.response_type
            pattern = answer.classification.detected_pattern
            score -= 60
            reasons.append(
                f"final output is {kind}, not a result" + (f" ('{pattern}')" if pattern else "")
            )
            remaining.append(
                pending(
                    "answer the user's request",
                    "the final answer "
                    + ("is a stock phrase" if kind == "generic" else "only asks for clarification")
                    + (f" ('{pattern}')" if pattern else ""),
                )
            )
            suggestions.append("answer with the result of the task, not filler or a question")
            findings.append((f"{kind}_answer", quote_whole(output, 120)))
        left = first_match(output, REMAINING_WORK_RE)
        if left:
            score -= 30
            remaining.append(
                pending(
                    "finish the user's request",
                    f"the final answer says work remains ('{quote_whole(left, 80)}')",
                )
            )
            findings.append(("says_work_remains", _sentence_around(output, left)))
            reasons.append(f"final output says work remains ('{left}')")
            suggestions.append("finish the remaining work before answering")
        score -= self._planned_cost(window, missing, reasons, suggestions)
        return _clamp(score)

    @staticmethod
    def _planned_cost(
        window: Window, missing: list[str], reasons: list[str], suggestions: list[str]
    ) -> float:
        if not missing or window.task is None:
            return 0.0
        reasons.append(
            f"{len(missing)} of {len(window.task.planned_steps)} planned steps not executed"
        )
        suggestions.append("run the planned steps still missing: " + ", ".join(missing[:5]))
        return 50 * len(missing) / len(window.task.planned_steps)

    @staticmethod
    def _health(
        window: Window,
        stats: RunStats,
        failed: list[FailedStep],
        limit: str | None,
        reasons: list[str],
        suggestions: list[str],
        findings: list[tuple[str, str]],
    ) -> int:
        score = 100.0
        limits = sum(1 for c in window.tool_calls if limit_call(c))
        n_failed = stats.failed_calls - limits
        if n_failed > 0:
            unrecovered = len(failed)
            recovered = max(0, n_failed - unrecovered)
            if unrecovered:
                score -= ENDED_ON_ERROR_COST
                tools = ", ".join(sorted({f.tool or "?" for f in failed}))
                reasons.append(f"the run ended on a failed tool call ({tools})")
                suggestions.append(f"retry or replace the failed tool call(s): {tools}")
            if recovered:
                score -= min(RECOVERED_COST_MAX, RECOVERED_COST * recovered)
                reasons.append(f"{recovered} tool call(s) failed before later calls succeeded")
        if limit:
            score -= LIMIT_COST
        # (rule, evidence, why, what to do, health cost): how the run went, for any agent
        signals = (
            (
                "last_attempt_failed",
                last_attempt_failed(window),
                "the last of several attempts failed ({evidence})",
                "find why the action keeps failing before trying it again",
                LAST_ATTEMPT_COST,
            ),
            (
                "claim_contradicts_result",
                claim_contradicts_result(window),
                "the final claim contradicts the last result: {evidence}",
                "check the last result before claiming success",
                CONTRADICTED_COST,
            ),
            (
                "identical_call_loop",
                _loop(window, stats),
                f"the same call ran {LOOP_RUN}+ times in a row ({{evidence}})",
                "reuse earlier tool results instead of repeating identical calls",
                LOOP_COST,
            ),
        )
        for rule, evidence, why, fix, cost in signals:
            if evidence:
                findings.append((rule, evidence))
                reasons.append(why.format(evidence=quote_whole(evidence, 120)))
                suggestions.append(fix)
                score -= cost
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

    def _efficiency(
        self,
        window: Window,
        stats: RunStats,
        norms: Norms | None,
        relative: list[tuple[str, str]],
        reasons: list[str],
        suggestions: list[str],
    ) -> int:
        score = 100.0
        if self.tool_call_budget and stats.tool_calls > self.tool_call_budget:
            over = stats.tool_calls - self.tool_call_budget
            score -= min(50, 3 * over)
            reasons.append(f"{stats.tool_calls} tool calls, {over} over the budget")
        if norms is not None and norms.ready:
            # graded against the agent's own runs: above its median costs a little, far
            # above its 95th percentile most (the findings name the measures above the 90th)
            values = stats.measures()
            score -= sum(GRADED_COST * norms.position(m, values.get(m)) for m in RELATIVE_MEASURES)
        for _, evidence in relative:
            reasons.append(evidence)
        if relative:
            suggestions.append("compare this run with the agent's usual runs: what made it longer")
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
        return _clamp(score)

    @staticmethod
    def _notes(window: Window, stats: RunStats, norms: Norms | None, reasons: list[str]) -> None:
        """What the verdict could not use, said so (never a penalty)."""
        if norms is not None and not norms.ready:
            # not the count so far: a run judged again after a crash was learned already,
            # and its verdict must read the same
            reasons.append(
                f"note: this agent's normal is still being learned (fewer than "
                f"{norms.min_runs} runs): nothing judged against it yet"
            )
        if window.events_over_cap:
            reasons.append(
                f"note: {window.events_over_cap} events past the cap on events per request "
                "were counted, not read: the verdict is on the run up to the cap"
            )
        if window.steps_dropped:
            reasons.append(
                f"note: {window.steps_dropped} of {window.step_count} steps beyond the step "
                f"limit were kept as counts only ({stats.tool_calls} tool calls in all)"
            )

    @staticmethod
    def _summary(
        window: Window,
        stats: RunStats,
        failed: list[FailedStep],
        remaining: list[RemainingStep],
        blocked: bool,
        stop: Stop | None = None,
        incomplete: bool = True,
    ) -> str:
        parts = [f"{stats.tool_calls} tool call(s)"]
        if stop is not None:
            parts.append(stop.words())
        calls = [f for f in failed if f.tool is not None]
        if calls:
            parts.append(f"ended on a failed call ({calls[0].tool})")
        if window.final is not None and window.final.error:
            parts.append("ended with an error")
        if blocked:
            parts.append("output blocked by validator")
        if window.final is None:
            parts.append(f"no final response (closed by {window.closed_by})")
        else:
            parts.append("final response present")
        if remaining and incomplete:
            parts.append(f"{len(remaining)} item(s) of work remaining")
        elif remaining:  # the goal was reached: what is left is a failure to make good
            parts.append(f"{len(remaining)} failed step(s) to make good")
        return "; ".join(parts)


def _stopped(
    stop: Stop, reasons: list[str], suggestions: list[str], findings: list[tuple[str, str]]
) -> None:
    at = "" if stop.at_step is None else f" at step {stop.at_step}"
    findings.append(("stopped_by_intervention", f"{stop.kind} {stop.crossed}{at}"))
    if stop.after_the_fact:  # a team's check: the call it flagged had run when the stop came
        reasons.append(
            f"{stop.words()}, after the call it flagged had run: judged on what the run did"
        )
        suggestions.append(
            f"review the call the check {stop.crossed} flagged{at}: it went through before the "
            "stop, so undo it if it must not stand"
        )
        return
    reasons.append(f"{stop.words()} before its answer: the goal was not reached")
    suggestions.append(
        f"find what made the run cross its {stop.crossed} budget"
        if stop.kind == "budget"
        else "find what kept the run repeating itself, and re-plan there"
    )


def _pending(stop: Stop | None, crash: FailedStep | None = None) -> RemainingStep | None:
    """The request left pending by a stop (the stop as the why), or by an error that ended
    the run."""
    if stop is not None:
        return pending("finish the user's request", f"the run was {stop.words()}")
    if crash is not None:
        return pending("finish the user's request", crash.reason)
    return None


def _crash(window: Window) -> FailedStep | None:
    """The error the run ended by (its final response's `error`), as a failed step: the step
    that raised when one says so (the last step with an error), else the final response."""
    final = window.final
    if final is None or not final.error:
        return None
    index = final.step_index
    for step in reversed(window.steps):
        if getattr(step, "error", None) and (index is None or step.step_index <= index):
            index = step.step_index
            break
    tool = None  # the run raised, not a tool: a failed call is counted by the call itself
    return FailedStep(
        index=index,
        tool=tool,
        reason=f"the run ended with an error: {quote_whole(final.error, 120)}",
    )


def _actors(window: Window) -> dict[int, str]:
    """Every step's index -> who took it, as blame names it (blame.py `actor_of`): in a
    multi-agent run its actor, else its tool; in a one-agent run the agent ("" when unnamed)."""
    multi = multi_agent(window)
    if not multi:  # one agent took every step
        agent = actor_of(window, None, False) or ""
        found = dict.fromkeys((s.step_index for s in window.steps), agent)
    else:
        found = {s.step_index: actor_of(window, s, True) or "" for s in window.steps}
    final = window.final
    if final is not None:  # numbered as blame numbers it when it has no number
        index = final.step_index
        found[max(found, default=0) + 1 if index is None else index] = (
            actor_of(window, final, multi) or ""
        )
    return found


def _looped_then_gave_up(window: Window, findings: list[tuple[str, str]]) -> str | None:
    """What the answer admits, when the run looped before it: the same call in a row (the
    rules' loop), or a loop tracejudge steered it out of while it ran. A loop alone is a cost
    and a give-up alone is incomplete work; together the run spent itself going round and
    handed the user nothing."""
    looped = any(rule == "identical_call_loop" for rule, _ in findings) or any(
        fired[0] == "loop" for fired in window.interventions
    )
    if not looped:
        return None
    said = next((evidence for rule, evidence in findings if rule in GAVE_UP), None)
    return None if said is None else f"'{quote_whole(said, 80)}'"


def _loop(window: Window, stats: RunStats) -> str | None:
    """The same call (tool and arguments) run LOOP_RUN or more times in a row: a loop, a fact
    whatever the agent (a call run again after other work is not one). Found in the steps
    kept, with their arguments; beyond the step limit, from the run's counts."""
    run, previous = 0, None
    for call in window.tool_calls:
        signature = (call.tool, call.args_summary)
        run = run + 1 if signature == previous and call.args_summary is not None else 1
        previous = signature
        if run >= LOOP_RUN:
            return f"{call.tool} {head_whole(call.args_summary or '', 60)}"
    if stats.identical_streak >= LOOP_RUN:
        return f"{stats.streak_tool} ({stats.identical_streak} identical calls in a row)"
    return None
