"""Where the benchmarks find labelled data: the team's full sets beside the repository
(`../shared/data`), which a clone does not have. The tests read the 40-run subset kept in
`tests/data/tau_airline` instead, and never this."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
TAU_AIRLINE = SHARED_DATA / "tau_airline"


def require(path: Path, instead: str) -> Path:
    """`path`, or exit with one line naming it and what to do instead (no traceback)."""
    if not path.exists():
        sys.exit(
            f"{path} not found (by default a benchmark reads the team's data sets beside the "
            f"repository, which a clone lacks): {instead}"
        )
    return path
