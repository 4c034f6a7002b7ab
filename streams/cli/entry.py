"""The `tracejudge` command's entry point: it imports nothing but the standard library first, so
an install without the worker's dependencies (the bare `pip install tracejudge` an agent uses)
gets a line saying what to install instead of a traceback."""

from __future__ import annotations

import sys

USAGE_OR_CONFIGURATION = 2


def main() -> int:
    try:
        from tracejudge.streams.cli.main import main as run
    except ModuleNotFoundError as exc:
        sys.stderr.write(
            f"tracejudge: the command needs the worker's dependencies ({exc.name} is not "
            "installed): pip install 'tracejudge[worker]'\n"
        )
        return USAGE_OR_CONFIGURATION
    return run()
