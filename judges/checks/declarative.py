"""Checks without code: what most teams write first, each a `Check` like those in code.

- `never_call`: tools that must never be called;
- `call_before`: pairs [A, B]: B only after a successful A;
- `needs_confirmation`: tools whose call needs the user's explicit yes in the turn before it;
- `max_calls`: {tool: n}: at most n calls of the tool in one run;
- `final_must_match` / `final_must_not_match`: regular expressions the final answer must (not)
  contain, in RE2's syntax (Python's without backreferences and lookaround): RE2 runs in time
  linear in the answer, so no pattern can hold the worker.
Each fails the run (severity fail) and points at the step that broke it. The step-wise ones
(`never_call`, `call_before`, `needs_confirmation`, `max_calls`) hold on a run cut at any step
too: they are marked `per_step`, and the worker runs them at each new step, stopping (or
steering) the run on the step that breaks them. Each is written once, as a stepper fed one
step at a time (`Check.stepper`): in flight the worker feeds it each new step (constant time
per step, whatever the run's length), and on a closed run the same stepper reads the run from
its start, so the two never disagree.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import re2

from tracejudge.judges.checks.api import Check, Failure, Stepper, StepperStart
from tracejudge.judges.checks.view import Run, StepView
from tracejudge.judges.rules.conversation import is_go_ahead

PER_STEP = ("never_call", "call_before", "needs_confirmation", "max_calls")
FINAL = ("final_must_match", "final_must_not_match")


def _whole(start: StepperStart) -> Callable[[Run], Failure | None]:
    """The check on a whole run: its steps fed in order to a new stepper, the first failure.
    One definition serves the closed run and the run in flight, so both say the same."""

    def check(run: Run) -> Failure | None:
        step = start(run.goal)
        for each in run.steps:
            found = step(each)
            if found is not None:
                return found
        return None

    return check


def never_call(tools: list[str]) -> StepperStart:
    banned = set(tools)

    def start(goal: str | None) -> Stepper:
        def step(s: StepView) -> Failure | None:
            if s.type == "tool_call" and s.tool in banned:
                return Failure(f"{s.tool} must never be called", s.index)
            return None

        return step

    return start


def call_before(pairs: list[tuple[str, str]]) -> StepperStart:
    def start(goal: str | None) -> Stepper:
        done: set[str] = set()

        def step(s: StepView) -> Failure | None:
            if s.type != "tool_call":
                return None
            for first, then in pairs:
                if s.tool == then and first not in done:
                    return Failure(f"{then} called before {first} succeeded", s.index)
            if s.ok and s.tool:
                done.add(s.tool)
            return None

        return step

    return start


def needs_confirmation(tools: list[str]) -> StepperStart:
    guarded = set(tools)

    def start(goal: str | None) -> Stepper:
        last_user = [goal or ""]

        def step(s: StepView) -> Failure | None:
            if s.type == "user_message":
                last_user[0] = s.text or ""
            elif s.type == "tool_call" and s.tool in guarded and not is_go_ahead(last_user[0]):
                return Failure(
                    f"{s.tool} called without the user's yes in the turn before it", s.index
                )
            return None

        return step

    return start


def max_calls(limits: dict[str, int]) -> StepperStart:
    def start(goal: str | None) -> Stepper:
        counts: dict[str, int] = {}

        def step(s: StepView) -> Failure | None:
            if s.type != "tool_call" or s.tool not in limits:
                return None
            counts[s.tool] = counts.get(s.tool, 0) + 1
            if counts[s.tool] > limits[s.tool]:
                return Failure(
                    f"{s.tool} called {counts[s.tool]} times (at most {limits[s.tool]})", s.index
                )
            return None

        return step

    return start


def pattern(text: str) -> Any:
    """A checks file's regular expression, compiled by RE2: linear in the text, whatever the
    pattern (no backreferences or lookaround, which cannot be). Raises `re2.error`."""
    options = re2.Options()
    options.log_errors = False  # the error is raised, and said once by whoever reads the file
    return re2.compile(text, options=options)


def final_must_match(patterns: list[str], present: bool) -> Callable[[Run], Failure | None]:
    compiled = [pattern(p) for p in patterns]

    def check(run: Run) -> Failure | None:
        if run.final_answer is None:
            return None  # no answer: the built-in rules say so
        for each in compiled:
            found = each.search(run.final_answer) is not None
            if found != present:
                said = "lacks" if present else "contains"
                return Failure(f"the final answer {said} /{each.pattern}/")
        return None

    return check


def declared(name: str, key: str, value: object, per_step_action: str = "steer") -> Check:
    """One no-code check from a checks file's `key = value` (validated by the file reader)."""
    steppers: dict[str, Callable[[], StepperStart]] = {
        "never_call": lambda: never_call(list(value)),  # type: ignore[call-overload]
        "call_before": lambda: call_before([tuple(p) for p in value]),  # type: ignore[attr-defined,misc]
        "needs_confirmation": lambda: needs_confirmation(list(value)),  # type: ignore[call-overload]
        "max_calls": lambda: max_calls(dict(value)),  # type: ignore[call-overload]
    }
    finals: dict[str, Callable[[], Callable[[Run], Failure | None]]] = {
        "final_must_match": lambda: final_must_match(list(value), True),  # type: ignore[call-overload]
        "final_must_not_match": lambda: final_must_match(list(value), False),  # type: ignore[call-overload]
    }
    stepper = steppers[key]() if key in steppers else None
    return Check(
        name=name,
        fn=_whole(stepper) if stepper is not None else finals[key](),
        stepper=stepper,
        # what the check says, digested: its version changes with its contents (str hashes
        # are seeded per process: not this)
        version=hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8],
        per_step=key in PER_STEP,
        action="stop" if per_step_action == "stop" else "steer",
        # ours and bounded: tool names, the go-ahead words, and patterns RE2 runs in linear time
        inline=True,
    )
