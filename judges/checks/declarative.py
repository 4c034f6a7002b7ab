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
steering) the run on the step that breaks them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import re2

from tracejudge.judges.checks.api import Check, Failure
from tracejudge.judges.checks.view import Run
from tracejudge.judges.rules.conversation import is_go_ahead

PER_STEP = ("never_call", "call_before", "needs_confirmation", "max_calls")
FINAL = ("final_must_match", "final_must_not_match")


def never_call(tools: list[str]) -> Callable[[Run], Failure | None]:
    banned = set(tools)

    def check(run: Run) -> Failure | None:
        hit = next((s for s in run.calls() if s.tool in banned), None)
        return None if hit is None else Failure(f"{hit.tool} must never be called", hit.index)

    return check


def call_before(pairs: list[tuple[str, str]]) -> Callable[[Run], Failure | None]:
    def check(run: Run) -> Failure | None:
        done: set[str] = set()
        for step in run.calls():
            for first, then in pairs:
                if step.tool == then and first not in done:
                    return Failure(f"{then} called before {first} succeeded", step.index)
            if step.ok and step.tool:
                done.add(step.tool)
        return None

    return check


def needs_confirmation(tools: list[str]) -> Callable[[Run], Failure | None]:
    guarded = set(tools)

    def check(run: Run) -> Failure | None:
        last_user = run.goal or ""
        for step in run.steps:
            if step.type == "user_message":
                last_user = step.text or ""
            elif step.type == "tool_call" and step.tool in guarded and not is_go_ahead(last_user):
                return Failure(
                    f"{step.tool} called without the user's yes in the turn before it", step.index
                )
        return None

    return check


def max_calls(limits: dict[str, int]) -> Callable[[Run], Failure | None]:
    def check(run: Run) -> Failure | None:
        counts: dict[str, int] = {}
        for step in run.calls():
            if step.tool in limits:
                counts[step.tool] = counts.get(step.tool, 0) + 1
                if counts[step.tool] > limits[step.tool]:
                    return Failure(
                        f"{step.tool} called {counts[step.tool]} times (at most "
                        f"{limits[step.tool]})",
                        step.index,
                    )
        return None

    return check


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


def declared(name: str, key: str, value: object, per_step_action: str = "stop") -> Check:
    """One no-code check from a checks file's `key = value` (validated by the file reader)."""
    makers: dict[str, Callable[[], Callable[[Run], Failure | None]]] = {
        "never_call": lambda: never_call(list(value)),  # type: ignore[call-overload]
        "call_before": lambda: call_before([tuple(p) for p in value]),  # type: ignore[attr-defined,misc]
        "needs_confirmation": lambda: needs_confirmation(list(value)),  # type: ignore[call-overload]
        "max_calls": lambda: max_calls(dict(value)),  # type: ignore[call-overload]
        "final_must_match": lambda: final_must_match(list(value), True),  # type: ignore[call-overload]
        "final_must_not_match": lambda: final_must_match(list(value), False),  # type: ignore[call-overload]
    }
    return Check(
        name=name,
        fn=makers[key](),
        # what the check says, digested: its version changes with its contents (str hashes
        # are seeded per process: not this)
        version=hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8],
        per_step=key in PER_STEP,
        action="steer" if per_step_action == "steer" else "stop",
        # ours and bounded: tool names, the go-ahead words, and patterns RE2 runs in linear time
        inline=True,
    )
