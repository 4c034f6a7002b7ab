"""The settings a command runs with, from the environment and a settings file: one error path
for every command, whichever option names the file (`--config`, replay's `--against`), so a
bad value or a check that cannot be imported is the same lines on stderr and exit code 2."""

from __future__ import annotations

import sys

from tracejudge.settings import Settings, SettingsError, load_settings


def loaded(config: str | None, label: str = "") -> Settings | None:
    """The settings; None once each problem is a line on stderr, after `label` (which
    settings, where a command reads two)."""
    said = f"tracejudge: bad configuration: {label}{': ' if label else ''}"
    try:
        return load_settings(config)
    except SettingsError as exc:
        for problem in exc.problems:
            print(f"{said}{problem}", file=sys.stderr)
    except (FileNotFoundError, ValueError) as exc:
        print(f"{said}{exc}", file=sys.stderr)
    return None
