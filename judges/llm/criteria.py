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
    [agents."support-*".dimensions]   # optional: scored by the judge beside its own three
    policy_compliance = "Does the run follow the refund and delivery policy above?"
    [agents."support-*".thresholds]   # optional: a `low_dimension` alert below it
    policy_compliance = 70

The criteria go to the judge as the operator's instructions, in the system message, outside the
fenced run data that the run's own text can never leave: a trace cannot write criteria.
A dimension is added to the judge's answer schema (an integer 0-100, required), carried in the
evaluation's `dimension_scores.criteria` and counted in the judge's score like its own three.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tracejudge.judges.llm.answer import DIMENSION_NAME
from tracejudge.prompts import JudgePrompt
from tracejudge.tables.agent_tables import for_agent, read_toml, split_tables

KEYS = ("criteria", "version", "good_example", "bad_example", "dimensions", "thresholds")
MAX_CHARS = 4_000  # per text: the operator's criteria, not a second prompt
MAX_DIMENSIONS = 4  # each one a score the judge must give: a few, not a second rubric
MAX_DIMENSION_CHARS = 300
# names the answer or the evaluation's scores already use: a dimension cannot take one over
TAKEN = frozenset(
    {
        "completeness", "execution_health", "efficiency", "correctness", "relevance",
        "actionability", "criteria", "success", "incomplete", "failed_steps", "remaining_steps",
        "summary", "blame", "reasons", "suggestions", "criteria_scores",
    }
)  # fmt: skip


class CriteriaError(ValueError):
    """The criteria file cannot be used: which table, which key, why."""


@dataclass(frozen=True)
class Criteria:
    text: str | None
    version: str
    good_example: str | None = None
    bad_example: str | None = None
    # name -> what the judge scores under it, in the file's order
    dimensions: tuple[tuple[str, str], ...] = ()
    # name -> the score below which a verdict alerts (`low_dimension`), for the dimensions
    # given one; the others are shown and measured, never alerted on
    thresholds: tuple[tuple[str, int], ...] = ()
    digest: str = ""  # of everything above: a cached answer under other criteria is never taken

    def section(self) -> str:
        lines = [
            "## The operator's criteria for this agent",
            "",
            "The team that runs this agent judges its runs by these criteria too. They come "
            "from the operator, not from the run: hold the run to them in your verdicts, "
            "scores, reasons and blame.",
        ]
        if self.text:
            lines += ["", self.text.strip()]
        if self.good_example:
            lines += ["", f"A good run, by these criteria: {self.good_example.strip()}"]
        if self.bad_example:
            lines += ["", f"A bad run, by these criteria: {self.bad_example.strip()}"]
        if self.dimensions:
            lines += ["", "Score these too, each an integer 0-100 under its own key:"]
            lines += [f"- {name}: {what.strip()}" for name, what in self.dimensions]
        return "\n".join(lines)

    def schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The judge's answer schema with the agent's dimensions added, each required."""
        if not self.dimensions:
            return schema
        properties = dict(schema.get("properties", {}))
        for name, what in self.dimensions:
            properties[name] = {
                "type": "integer",
                "minimum": 0,
                "maximum": 100,
                "description": what.strip()[:MAX_DIMENSION_CHARS],
            }
        required = [*schema.get("required", []), *(name for name, _ in self.dimensions)]
        return {**schema, "properties": properties, "required": required}


def with_criteria(prompt: JudgePrompt, criteria: Criteria | None) -> JudgePrompt:
    """The judge's prompt with the agent's criteria after its own instructions and its
    dimensions in the answer schema; its version names both."""
    if criteria is None:
        return prompt
    return replace(
        prompt,
        system=f"{prompt.system.rstrip()}\n\n{criteria.section()}\n",
        schema=criteria.schema(prompt.schema),
        version=f"{prompt.version}+criteria-{criteria.version}",
        dimensions=tuple(name for name, _ in criteria.dimensions),
        cache_tag=criteria.digest,
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
        if key in ("dimensions", "thresholds"):
            continue
        if not isinstance(value, str) or not value.strip():
            raise CriteriaError(f"{where}: {key} must be a non-empty string")
        if len(value) > MAX_CHARS:
            raise CriteriaError(f"{where}: {key} is {len(value)} characters (at most {MAX_CHARS})")
    dimensions = _dimensions(table.get("dimensions", {}), where)
    thresholds = _thresholds(table.get("thresholds", {}), dimensions, where)
    if "criteria" not in table and not dimensions:
        raise CriteriaError(f"{where}: criteria is missing (or give dimensions)")
    # of what the judge reads: an alert threshold changed is no reason to ask the model again
    read = sorted((k, v) for k, v in table.items() if k != "thresholds")
    digest = hashlib.sha256(repr(read).encode()).hexdigest()[:8]
    return Criteria(
        text=table.get("criteria"),
        version=table.get("version", digest),
        good_example=table.get("good_example"),
        bad_example=table.get("bad_example"),
        dimensions=dimensions,
        thresholds=thresholds,
        digest=digest,
    )


def _thresholds(
    value: Any, dimensions: tuple[tuple[str, str], ...], where: str
) -> tuple[tuple[str, int], ...]:
    """`[...thresholds] name = 70`: an alert when the judge scores the dimension below it."""
    where = f"{where} thresholds"
    if not isinstance(value, dict):
        raise CriteriaError(f"{where}: must be a table of dimension = lowest score (0-100)")
    named = {name for name, _ in dimensions}
    for name, floor in value.items():
        if name not in named:
            raise CriteriaError(
                f"{where}: {name!r} is not a dimension of this table "
                f"({', '.join(sorted(named)) or 'it has none'})"
            )
        if isinstance(floor, bool) or not isinstance(floor, int) or not 0 < floor <= 100:
            raise CriteriaError(f"{where}: {name} must be an integer score 1-100")
    return tuple(value.items())


def _dimensions(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    where = f"{where} dimensions"
    if not isinstance(value, dict):
        raise CriteriaError(f'{where}: must be a table of name = "what the judge scores"')
    if len(value) > MAX_DIMENSIONS:
        raise CriteriaError(f"{where}: {len(value)} dimensions (at most {MAX_DIMENSIONS})")
    for name, what in value.items():
        if not DIMENSION_NAME.fullmatch(name):
            raise CriteriaError(
                f"{where}: {name!r} is not a dimension name (lower case, digits, _; 2-40)"
            )
        if name in TAKEN:
            raise CriteriaError(f"{where}: {name!r} is taken by the judge's own answer")
        if not isinstance(what, str) or not what.strip():
            raise CriteriaError(f"{where}: {name} must say what the judge scores (a string)")
        if len(what) > MAX_DIMENSION_CHARS:
            raise CriteriaError(
                f"{where}: {name} is {len(what)} characters (at most {MAX_DIMENSION_CHARS})"
            )
    return tuple(value.items())
