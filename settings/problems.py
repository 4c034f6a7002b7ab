"""What is wrong with the settings: one error naming every setting that is."""

from __future__ import annotations

# Defaults of the judges' own settings are theirs: written there once, read here.

CONFIG_FILE_ENV = "TRACEJUDGE_CONFIG_FILE"
PREFIX = "TRACEJUDGE_"
# TRACEJUDGE_ variables that are not settings: the CLI's config file, the scripts' download cache
NOT_SETTINGS = frozenset({CONFIG_FILE_ENV, "TRACEJUDGE_CACHE"})
# old name -> new name: the old one still works, with a deprecation line, when the new one is
# not given (names follow one pattern: `<thing>_enabled`, as llm_judge_enabled)
RENAMED = {"enable_reflection": "reflection_enabled"}


MIN_INPUT_TOKENS = 1000  # the judge's input at least: a trace's goal, answer and a few steps


class SettingsError(ValueError):
    """Configuration that cannot be used: one line per problem, naming the variable."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class SettingProblem(ValueError):
    """What a check across settings (a model validator) found, with the settings it is about
    (field names): its line names the one, or says "settings:" for several, as a field's own
    error names its field (`_bad_value`)."""

    def __init__(self, message: str, *names: str) -> None:
        # named in itself too, for a Settings(...) made in code (no `_bad_value` line)
        one = f"{PREFIX}{names[0].upper()}: " if len(names) == 1 else ""
        super().__init__(one + message)
        self.message = message
        self.names = names
