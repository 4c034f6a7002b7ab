"""What a check returns: nothing when the run passes, else a `Failure` (or several)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tracejudge.judges.checks.view import Run, StepView

# fail: the run fails (not passed, its score capped below the threshold); lower: its score goes
# down, the verdict stands; note: shown and counted, nothing changes
Severity = Literal["fail", "lower", "note"]
SEVERITIES: tuple[Severity, ...] = ("fail", "lower", "note")
MESSAGE_LIMIT = 500  # characters of a finding's message kept: it goes into verdicts and control
FAILURES_LIMIT = 20  # findings kept per check and run: a check may not flood a verdict


@dataclass(frozen=True)
class Failure:
    """A check's finding: `message` in words; `step`: the index of the step it points at (a
    `StepView.index`); `severity`: fail (default), lower or note."""

    message: str
    step: int | None = None
    severity: Severity = "fail"

    def __post_init__(self) -> None:
        if not isinstance(self.message, str) or not self.message.strip():
            raise ValueError("a check's Failure needs a message")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r}: one of {', '.join(SEVERITIES)}")
        step = self.step
        if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
            raise ValueError(f"a Failure's step is a step index (an int, 0 or more): {step!r}")


# A check written one step at a time: started with the run's goal, then given each step in
# order, it answers a Failure on the step that breaks the check (declarative.py's checks)
Stepper = Callable[["StepView"], "Failure | None"]
StepperStart = Callable[[str | None], Stepper]


@dataclass(frozen=True)
class Check:
    """A check as the worker runs it: `name` (shown with its findings), `version` (what changes
    when its logic does), the function, whether it also runs on each new step while the run runs
    (`per_step`) and what a failure then sends the run (`action`: steer or stop)."""

    name: str
    fn: Callable[[Run], Failure | Iterable[Failure] | None]
    version: str = "1"
    per_step: bool = False
    action: Literal["steer", "stop"] = "steer"
    # run on a session's whole conversation at each revision of its verdict (its turns'
    # steps, the user's messages between them, the last answer), never on a single request
    session: bool = False
    # ours, bounded by the run's length, reading no pattern a file gave (the tool-name checks
    # without code): run where they are asked, without a thread's round trip; a team's code,
    # or a team's regular expression on the run's text, may hang, and runs on the pool
    inline: bool = False
    # the check one step at a time (ours, without code): fed each new step in flight, where
    # calling `fn` on the whole run at every step would cost time quadratic in its length
    stepper: StepperStart | None = None
    # how the check process reaches the function: "module:function" (a code check's name).
    # None: derived from the function's module and name, where it can be imported by them
    target: str | None = None

    @property
    def reachable(self) -> str | None:
        """The `module:function` the check process imports the function by, or None where it
        cannot (a lambda, a function made inside another)."""
        if self.target is not None:
            return self.target
        module, name = getattr(self.fn, "__module__", None), getattr(self.fn, "__qualname__", "")
        if not module or module == "__main__" or not name or "<" in name:
            return None
        return f"{module}:{name}"

    def failures(self, run: Run) -> list[Failure]:
        """What the check found; raises what the check raises, or TypeError for an answer that
        is not a Failure, a list of them, or None."""
        found = self.fn(run)
        if found is None:
            return []
        if isinstance(found, Failure):
            return [found]
        if isinstance(found, str | bytes | dict):
            raise TypeError(
                f"check {self.name} returned a {type(found).__name__}: a Failure, a list, or None"
            )
        out: list[Failure] = []
        for item in found:  # a generator that never ends is cut at the limit
            if not isinstance(item, Failure):
                raise TypeError(
                    f"check {self.name} returned a {type(item).__name__} among its findings: "
                    "a Failure, a list, or None"
                )
            out.append(item)
            if len(out) >= FAILURES_LIMIT:
                break
        return out
