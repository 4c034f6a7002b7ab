"""A team's own checks: what a bad run looks like for its agent, in code or in a file.

A check is a plain function given one run as a read-only `Run` (view.py) and returning nothing
when the run passes, or a `Failure` (api.py): a message, optionally the step it points at and a
severity. Which checks an agent gets is book.py's; the no-code ones are declarative.py's; their
results go into the rules' verdict in apply.py. The worker runs a team's checks on every closed
run, `tracejudge replay` and `tracejudge agreement` run the same ones, and each shows and is
measured like a built-in rule (docs/checks.md). May import `rules` and below.

    from tracejudge.judges.checks import Failure, Run

    def refund_within_total(run: Run) -> Failure | None:
        ...
"""

from __future__ import annotations

from tracejudge.judges.checks.api import Failure, Severity
from tracejudge.judges.checks.view import Run, StepView

__all__ = ["Failure", "Run", "Severity", "StepView"]
