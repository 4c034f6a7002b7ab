"""How often the fault tests repeat: once in the full tier, N times under `scripts/soak.sh N`.

A fault passing once shows the behaviour; passing it N times in a row is the evidence a change
to the consume or commit path needs (a stall that comes one run in twenty), and costs minutes per
repeat, so it lives in the soak command rather than in every run of the suite.
"""

from __future__ import annotations

import os

SOAK_RUNS = "SOAK_RUNS"


def soak_runs() -> int:
    """N from `scripts/soak.sh N` (SOAK_RUNS), else 1."""
    value = os.environ.get(SOAK_RUNS, "1")
    try:
        runs = int(value)
    except ValueError:
        raise ValueError(f"{SOAK_RUNS}={value!r}: give a whole number of runs") from None
    if runs < 1:
        raise ValueError(f"{SOAK_RUNS}={value!r}: give at least 1 run")
    return runs


def runs() -> list[int]:
    """The run numbers to parametrize a repeated fault test with: [1] or [1..N]."""
    return list(range(1, soak_runs() + 1))
