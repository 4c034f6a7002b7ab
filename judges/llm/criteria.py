"""A team's own criteria for the LLM judge, per agent: what its runs must do, in the team's
words, with an optional good and bad example, versioned.

From a TOML file (`TRACEJUDGE_LLM_CRITERIA_FILE`), tables like the budgets file's:

    [agents."support-*"]
    version = "2026-11-27"            # named in the evaluation's judge provenance
    criteria = '''
    Never promise a delivery date. A refund needs the customer's explicit yes first.
    '''
    good_example = "Asked 'shall I refund 20 EUR?', refunded after 'yes'; no date promised."
    bad_example = "Promised delivery 'by Friday' without a shipment lookup."

The criteria go to the judge as the operator's instructions, in the system message, outside the
fenced run data that the run's own text can never leave: a trace cannot write criteria.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tracejudge.models.agent_tables import for_agent, read_toml, split_tables
from tracejudge.prompts import JudgePrompt

KEYS = ("criteria", "version", "good_example", "bad_example")
MAX_CHARS = 4_000  # per text: the operator's criteria, not a second prompt


class CriteriaError(ValueError):
    """The criteria file cannot be used: which table, which key, why."""


@dataclass(frozen=True)
class Criteria:
    text: str
    version: str
    good_example: str | None = None
    bad_example: str | None = None

    def section(self) -> str:
        lines = [
            "## The operator's criteria for this agent",
            "",
            "The team that runs this agent judges its runs by these criteria too. They come "
            "from the operator, not from the run: hold the run to them in your verdicts, "
            "scores, reasons and blame.",
            "",
            self.text.strip(),
        ]
        if self.good_example:
            lines += ["", f"A good run, by these criteria: {self.good_example.strip()}"]
        if self.bad_example:
            lines += ["", f"A bad run, by these criteria: {self.bad_example.strip()}"]
        return "\n".join(lines)


def with_criteria(prompt: JudgePrompt, criteria: Criteria | None) -> JudgePrompt:
    """The judge's prompt with the agent's criteria after its own instructions; its version
    names both (a cached answer under other criteria is never taken)."""
    if criteria is None:
        return prompt
    return replace(
        prompt,
        system=f"{prompt.system.rstrip()}\n\n{criteria.section()}\n",
        version=f"{prompt.version}+criteria-{criteria.version}",
    )


@dataclass(frozen=True)
class CriteriaBook:
    default: Criteria | None = None
    agents: tuple[tuple[str, Criteria], ...] = ()

    def for_agent(self, agent: str | None) -> Criteria | None:
        own = for_agent(agent, self.agents)
        return self.default if own is None else own

    @classmethod
    def read(cls, path: Path) -> CriteriaBook:
        where = f"criteria file {path}"
        raw = read_toml(path, "criteria file", CriteriaError)
        default, agents = split_tables(raw, where, CriteriaError)
        return cls(
            None if default is None else _criteria(default, f"{where} [default]"),
            tuple(
                (name, _criteria(table, f'{where} [agents."{name}"]'))
                for name, table in agents.items()
            ),
        )


def _criteria(table: Any, where: str) -> Criteria:
    if not isinstance(table, dict):
        raise CriteriaError(f"{where}: must be a table ({', '.join(KEYS)})")
    unknown = set(table) - set(KEYS)
    if unknown:
        raise CriteriaError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(KEYS)}"
        )
    for key, value in table.items():
        if not isinstance(value, str) or not value.strip():
            raise CriteriaError(f"{where}: {key} must be a non-empty string")
        if len(value) > MAX_CHARS:
            raise CriteriaError(f"{where}: {key} is {len(value)} characters (at most {MAX_CHARS})")
    if "criteria" not in table:
        raise CriteriaError(f"{where}: criteria is missing")
    text = table["criteria"]
    digest = hashlib.sha256(repr(sorted(table.items())).encode()).hexdigest()[:8]
    return Criteria(
        text=text,
        version=table.get("version", digest),
        good_example=table.get("good_example"),
        bad_example=table.get("bad_example"),
    )
