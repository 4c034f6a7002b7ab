"""Checks as a team writes them (imported by name in tests/test_checks.py), from the docs."""

from __future__ import annotations

import re

from tracejudge.judges.checks import Failure, Run
from tracejudge.judges.checks.book import check


def refund_within_total(run: Run) -> Failure | None:
    """A refund never exceeds the order's total, as the look-up before it gave it."""
    total = None
    for step in run.calls():
        if step.tool == "get_order" and step.result:
            found = re.search(r"total (\d+(?:\.\d+)?)", step.result)
            total = float(found.group(1)) if found else total
        if step.tool == "refund" and step.args and total is not None:
            asked = re.search(r"(\d+(?:\.\d+)?)", step.args)
            if asked and float(asked.group(1)) > total:
                return Failure(
                    f"refund of {asked.group(1)} over the order total {total:g}", step.index
                )
    return None


@check(version="2", per_step=True, action="steer")
def no_shouting(run: Run) -> Failure | None:
    """A note on answers in capitals: counted, the verdict unchanged."""
    if run.final_answer and run.final_answer.isupper():
        return Failure("the answer shouts", severity="note")
    return None


def broken(run: Run) -> Failure | None:
    raise RuntimeError("a bug in the team's check")


def slow(run: Run) -> Failure | None:
    import time

    time.sleep(2)  # past the time limit the tests set (0.5 s)
    return Failure("too late to count")


def lowers(run: Run) -> Failure | None:
    return Failure("answers without a reference number", severity="lower")


def stuck(run: Run) -> Failure | None:
    import time

    time.sleep(60)  # stuck for good
    return None


@check(per_step=True)
def counts_its_calls(run: Run) -> Failure | None:
    """A note on every run it reads: how often it was called shows in the metric."""
    return Failure(f"read {len(run.steps)} steps", severity="note")


def note_every_refund(run: Run) -> Failure | None:
    """A note on each run that refunds: the verdict unchanged, the run findable."""
    refunds = run.calls("refund")
    return Failure("a refund was made", refunds[0].index, severity="note") if refunds else None


@check(version="1", session=True)
def one_refund_per_conversation(run: Run) -> Failure | None:
    """Across the whole conversation, at most one refund: a session check."""
    refunds = [s for s in run.calls("refund_ticket") if s.ok]
    if len(refunds) > 1:
        return Failure(f"{len(refunds)} refunds in one conversation", refunds[1].index)
    return None


@check(session=True)
def spins_on_the_conversation(run: Run) -> Failure | None:
    """A session check stuck in a CPU loop for a minute: ended at its time limit."""
    import time

    until = time.monotonic() + 60
    while time.monotonic() < until:
        pass
    return None


@check(session=True)
def says_nonsense(run: Run) -> Failure | None:
    """A session check whose answer is no Failure: counted as its error."""
    return "the conversation looks odd"  # type: ignore[return-value]
