"""Per-request budgets: limits on steps, tool calls, model tokens, cost and wall
time; judges/inflight/spend.py counts a run against them. Pure.

The limits come from one TOML file (`TRACEJUDGE_BUDGETS_FILE`): a `[default]` table and
`[agents."NAME-OR-PATTERN"]` tables, each with any of `steps`, `tool_calls`, `tokens`,
`cost_usd`, `wall_s`:

    [default]
    steps = 300
    cost_usd = 5.0

    [agents."swe-agent/*"]   # fnmatch patterns; an exact name wins over any pattern,
    cost_usd = 3.0           # then the first pattern in the file that matches
    wall_s = 1800

    [agents."status-poller"] # asks for the same status until it changes: not a loop for it
    loop_repeat = 0

An agent's table replaces the default's limits it names and keeps the others. A limit left
out is no limit (0 is refused: leave it out). `loop_repeat`, `loop_cycles`,
`loop_same_failure` and `loop_no_new_result` set the loop rules' thresholds
(judges/inflight/loops.py) for the agents of the table, over the TRACEJUDGE_LOOP_* settings
(0: the rule off). `loop_action` (steer, steer_then_stop, stop; judges/inflight/escalation.py)
says what a loop does to the table's agents, `loop_actions = {rule = "steer", ...}` per rule.
The file is validated at start: an unknown key, a negative or non-numeric
limit, or a pattern that is not a string is one clear error naming the table and the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracejudge.judges.inflight.escalation import DEFAULT_LOOP_ACTION, LOOP_ACTIONS, LoopAction
from tracejudge.judges.inflight.loops import KINDS, LoopRules
from tracejudge.tables.agent_tables import for_agent, read_toml, split_tables

LIMITS = ("steps", "tool_calls", "tokens", "cost_usd", "wall_s")
INTEGER_LIMITS = ("steps", "tool_calls", "tokens")
# an agent's own loop thresholds (judges/inflight/loops.py), over the TRACEJUDGE_LOOP_* settings: a
# polling agent asks for the same status until it changes, and can turn `loop_repeat` off
LOOP_KEYS = {
    "loop_repeat": "repeat",
    "loop_cycles": "cycles",
    "loop_same_failure": "same_failure",
    "loop_no_new_result": "no_new_result",
}


class BudgetsError(ValueError):
    """The budgets file cannot be used: which table, which key, why."""


@dataclass(frozen=True)
class Budget:
    steps: int | None = None
    tool_calls: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    wall_s: float | None = None
    loops: tuple[tuple[str, int], ...] = ()  # (LoopRules field, value) given in the file
    # what a loop rule's crossing does: (rule, action), "*" for every rule without its own
    loop_actions: tuple[tuple[str, LoopAction], ...] = ()

    def over(self, other: Budget) -> Budget:
        """This budget's limits over `other`'s (the ones it leaves out stay `other`'s)."""
        given = {k: getattr(self, k) for k in LIMITS if getattr(self, k) is not None}
        loops = tuple({**dict(other.loops), **dict(self.loops)}.items())
        actions = dict(other.loop_actions)
        if "*" in dict(self.loop_actions):  # the agent's own default replaces the rules' too
            actions = {}
        actions.update(self.loop_actions)
        return replace(other, **given, loops=loops, loop_actions=tuple(actions.items()))

    def loop_action(self, rule: str) -> LoopAction:
        """steer, steer_then_stop or stop: what a crossing of `rule` does for this agent."""
        actions = dict(self.loop_actions)
        return actions.get(rule, actions.get("*", DEFAULT_LOOP_ACTION))

    def loop_rules(self, base: LoopRules) -> LoopRules:
        """The loop thresholds for this budget's agent: `base` (the settings') with the file's."""
        return replace(base, **dict(self.loops)) if self.loops else base

    @property
    def empty(self) -> bool:
        return all(getattr(self, k) is None for k in LIMITS)


@dataclass(frozen=True)
class BudgetBook:
    default: Budget = field(default_factory=Budget)
    agents: tuple[tuple[str, Budget], ...] = ()  # in file order

    def for_agent(self, agent: str | None) -> Budget:
        own = for_agent(agent, self.agents)
        return self.default if own is None else own.over(self.default)

    @classmethod
    def read(cls, path: Path) -> BudgetBook:
        return cls.of(read_toml(path, "budgets file", BudgetsError), str(path))

    @classmethod
    def of(cls, raw: dict[str, Any], where: str = "budgets") -> BudgetBook:
        default, agents = split_tables(raw, where, BudgetsError)
        return cls(
            _budget(default or {}, f"{where} [default]"),
            tuple(
                (name, _budget(table, f'{where} [agents."{name}"]'))
                for name, table in agents.items()
            ),
        )


def _budget(table: Any, where: str) -> Budget:
    if not isinstance(table, dict):
        raise BudgetsError(f"{where}: must be a table of limits ({', '.join(LIMITS)})")
    found: dict[str, int | float] = {}
    loops: dict[str, int] = {}
    actions: dict[str, LoopAction] = {}
    for key, value in table.items():
        if key == "loop_action":
            actions["*"] = _loop_action(key, value, where)
            continue
        if key == "loop_actions":
            actions.update(_loop_actions(value, where))
            continue
        if key in LOOP_KEYS:
            loops[LOOP_KEYS[key]] = _loop_threshold(key, value, where)
            continue
        if key not in LIMITS:
            known = ", ".join((*LIMITS, *LOOP_KEYS, "loop_action", "loop_actions"))
            raise BudgetsError(f"{where}: unknown limit {key!r}; known: {known}")
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if not numeric or value <= 0:
            raise BudgetsError(f"{where}: {key} = {value!r}: a positive number, or leave it out")
        if key in INTEGER_LIMITS and not isinstance(value, int):
            raise BudgetsError(f"{where}: {key} = {value!r}: a whole number")
        found[key] = value
    return Budget(
        **found,  # type: ignore[arg-type]
        loops=tuple(loops.items()),
        loop_actions=tuple(actions.items()),
    )


def _loop_action(key: str, value: Any, where: str) -> LoopAction:
    if value not in LOOP_ACTIONS:
        raise BudgetsError(f"{where}: {key} = {value!r}: one of {', '.join(LOOP_ACTIONS)}")
    return value  # type: ignore[no-any-return]


def _loop_actions(value: Any, where: str) -> dict[str, LoopAction]:
    if not isinstance(value, dict):
        raise BudgetsError(f'{where}: loop_actions must be a table: {{rule = "steer", ...}}')
    unknown = set(value) - set(KINDS)
    if unknown:
        raise BudgetsError(
            f"{where}: loop_actions: unknown rule(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(KINDS)}"
        )
    return {rule: _loop_action(f"loop_actions.{rule}", v, where) for rule, v in value.items()}


def _loop_threshold(key: str, value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise BudgetsError(f"{where}: {key} = {value!r}: a whole number (0: the rule off)")
    try:
        LoopRules(**{LOOP_KEYS[key]: value})
    except ValueError as exc:
        raise BudgetsError(f"{where}: {key} = {value!r}: {exc}") from exc
    return value
