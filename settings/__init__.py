"""The settings: one frozen object, read from TRACEJUDGE_* environment variables or a file
(dotenv syntax), checked as a whole at start. Every process reads them (`load_settings`); each
group of settings has its module (operation, kafka, redis, rules, judge), `load.py` puts them
together, `reference.py` writes docs/configuration.md from them.

Reading them imports what they name: the team's checks (`TRACEJUDGE_CHECKS`), the budgets,
checks and criteria files, so a typo stops the start, not a run. Nothing here imports the
streams: every process, the command line and the benchmarks use them alike.
"""

from __future__ import annotations

from tracejudge.settings.load import (
    Settings,
    changed_settings,
    describe_settings,
    load_settings,
    unknown_names,
)
from tracejudge.settings.problems import PREFIX, SettingProblem, SettingsError

__all__ = [
    "PREFIX",
    "SettingProblem",
    "Settings",
    "SettingsError",
    "changed_settings",
    "describe_settings",
    "load_settings",
    "unknown_names",
]
