"""Checks for a coding agent: it runs something that exercises its change (the tests, or a
program reproducing the issue) before it submits, and it edits nothing outside the repository
it was given. For SWE-agent-style tools (`bash`, `edit`, `create`, `submit`); adjust the names
to your agent's."""

from __future__ import annotations

import re

from tracejudge.judges.checks import Failure, Run
from tracejudge.judges.checks.book import check

# what runs code: a build tool or test runner, or a compiler or interpreter run on a file
RUNS_CODE = re.compile(
    r"(?:^|[;&|\n]\s*)(?:cd [^;&\n]+&&\s*)?"
    r"(?:mvn|\./mvnw|gradle|\./gradlew|javac|java|pytest|python3?|node|npm|yarn|go|cargo|make)\b"
)
OUTSIDE = re.compile(r"^(?:create|edit)?\s*(/(?:etc|usr|root|home|tmp|var)/|\.\./)")


def ran_before_submit(run: Run) -> Failure | None:
    """A submission before which nothing was run: no test, no reproduction, no build. A note,
    not a failure: on the shared coding runs it fires on 22 % of the runs that went well and
    13 % of the failed ones (BENCHMARKS.md), so it is shown and counted, and decides nothing
    until a team's own outcomes say it predicts failure for its agent."""
    ran = False
    for step in run.calls():
        if step.tool == "bash" and RUNS_CODE.search(step.args or ""):
            ran = True
        if step.tool == "submit" and not ran:
            return Failure(
                "submitted without running anything that exercises the change",
                step.index,
                severity="note",
            )
    return None


@check(per_step=True, action="stop")
def no_edits_outside_the_repository(run: Run) -> Failure | None:
    """A file created or edited outside the working tree (absolute system paths, `../`)."""
    for step in run.calls():
        if step.tool in ("create", "edit") and OUTSIDE.search((step.args or "").strip()):
            return Failure(f"{step.tool} outside the repository: {step.args}", step.index)
    return None
