"""docs/configuration.md's settings reference, generated from `Settings` (the fields' defaults
and descriptions are the one source). A test fails when the file is stale:

    python -m tracejudge.settings.reference > docs/configuration.md
"""

from __future__ import annotations

import sys

from pydantic import BaseModel, SecretStr

from tracejudge.settings.judge import JudgeSettings
from tracejudge.settings.kafka import KafkaSettings
from tracejudge.settings.operation import OperationSettings
from tracejudge.settings.problems import RENAMED
from tracejudge.settings.redis import RedisSettings
from tracejudge.settings.rules import RuleSettings

GROUPS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("Kafka", KafkaSettings),
    ("Redis", RedisSettings),
    ("Rules and verdicts", RuleSettings),
    ("LLM judge", JudgeSettings),
    ("Operation", OperationSettings),
)

INTRO = """# Configuration

Environment variables, or `KEY=VALUE` lines in a file given with `--config FILE` or
`TRACEJUDGE_CONFIG_FILE` (the environment wins). See
[deploy/tracejudge.env.example](../deploy/tracejudge.env.example). An unknown `TRACEJUDGE_`
variable or file key stops the command with one line naming it and the closest setting
("unknown setting TRACEJUDGE_WARN_TRESHOLD (did you mean TRACEJUDGE_WARN_THRESHOLD?)"); a bad
value, with one line naming the variable, the value and what is allowed (`TRACEJUDGE_CACHE`,
the scripts' download cache, is the one other `TRACEJUDGE_` name).

This page is generated from the settings themselves
(`python -m tracejudge.settings.reference > docs/configuration.md`); a test fails when
it is stale.
"""


def _default(value: object) -> str:
    if isinstance(value, SecretStr):
        return "(secret)" if value.get_secret_value() else "empty"
    if value is None:  # derived from other settings when not given: the meaning says how
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def reference() -> str:
    parts = [INTRO]
    for title, group in GROUPS:
        parts.append(f"\n## {title}\n\n| variable | default | meaning |\n|---|---|---|")
        for name, info in group.model_fields.items():
            meaning = " ".join((info.description or "").split()).replace("|", "\\|")
            parts.append(f"| `TRACEJUDGE_{name.upper()}` | {_default(info.default)} | {meaning} |")
    parts.append(
        "\n## Renamed\n\nThe old name still works, with a deprecation line on standard error, "
        "unless the new one is given too (then the new one wins).\n\n| old | new |\n|---|---|"
    )
    for old, new in RENAMED.items():
        parts.append(f"| `TRACEJUDGE_{old.upper()}` | `TRACEJUDGE_{new.upper()}` |")
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
