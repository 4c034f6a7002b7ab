"""Which checks each agent gets: code checks named in settings (`TRACEJUDGE_CHECKS`,
`module:function` comma-separated), shipped by packages (the `tracejudge.checks` entry-point
group), and the checks file (`TRACEJUDGE_CHECKS_FILE`), a TOML file like the budgets file:

    [default]
    code = ["team_checks:refund_within_total"]
    never_call = ["drop_database"]

    [agents."support-*"]            # fnmatch patterns; an exact name wins, then the first match
    needs_confirmation = ["refund", "cancel_reservation"]
    final_must_not_match = ['(?i)\\bwill (?:arrive|be delivered) (?:by|on)\\b']
    on_step = "stop"                # what a per-step check's failure sends: steer (default), stop

    [agents."support-*".session]    # checks of the whole conversation (sessions), same keys
    max_calls = {refund = 1}

An agent's table replaces the default's entries it names and keeps the others. Checked when read:
an unknown key, a value of the wrong shape, a pattern that does not compile or a code check that
cannot be imported is one error naming the table and the key.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import re2

from tracejudge.judges.checks.api import Check, Failure
from tracejudge.judges.checks.declarative import FINAL, PER_STEP, declared
from tracejudge.judges.checks.declarative import pattern as compile_pattern
from tracejudge.judges.checks.view import Run
from tracejudge.tables.agent_tables import for_agent, read_toml, split_tables

ENTRY_POINTS = "tracejudge.checks"
KEYS = ("code", "on_step", "session", *PER_STEP, *FINAL)
CHECK_ATTRIBUTE = "__tracejudge_check__"  # set by `check` below: version, per_step, action, session


class ChecksError(ValueError):
    """The checks cannot be used: which table, which key, why."""


def check(
    *, version: str = "1", per_step: bool = False, action: str = "steer", session: bool = False
) -> Callable[[Callable[[Run], Any]], Callable[[Run], Any]]:
    """Decorate a code check with its version, and to run it on the run so far at each new step
    (`per_step`; a failure then sends `action`, stop or steer, as a budget does), or on each
    session's whole conversation instead of each request (`session`)."""
    if action not in ("stop", "steer"):
        raise ValueError(f"action {action!r}: stop or steer")
    if session and per_step:
        raise ValueError("a session check reads the conversation, not each step of a request")

    def mark(fn: Callable[[Run], Any]) -> Callable[[Run], Any]:
        marks = {"version": version, "per_step": per_step, "action": action, "session": session}
        setattr(fn, CHECK_ATTRIBUTE, marks)
        return fn

    return mark


def code_check(target: str, where: str) -> Check:
    """`module:function` as a Check, imported now (an error names it and why); `where` says
    where it was named ("" for the setting, which the error's reader names)."""
    where = f"{where}: " if where else ""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ChecksError(f"{where}{target!r}: expected module:function")
    try:
        fn = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ChecksError(f"{where}{target!r} cannot be imported: {exc}") from exc
    if not callable(fn):
        raise ChecksError(f"{where}{target!r} is not a function")
    marks = getattr(fn, CHECK_ATTRIBUTE, {})
    return Check(
        name=target,
        target=target,
        fn=fn,
        version=str(marks.get("version", "1")),
        per_step=bool(marks.get("per_step", False)),
        action="stop" if marks.get("action") == "stop" else "steer",
        session=bool(marks.get("session", False)),
    )


@dataclass(frozen=True)
class CheckBook:
    common: tuple[Check, ...] = ()  # settings' and entry points' code checks: every agent's
    default: dict[str, Any] = field(default_factory=dict)
    agents: tuple[tuple[str, dict[str, Any]], ...] = ()
    _cache: dict[str, tuple[Check, ...]] = field(default_factory=dict, compare=False)

    @property
    def empty(self) -> bool:
        return not self.common and not self.default and not self.agents

    def for_agent(self, agent: str | None) -> tuple[Check, ...]:
        """The agent's checks of each closed request (not its session checks)."""
        key = agent or ""
        if key not in self._cache:
            table = self._table(agent)
            common = tuple(c for c in self.common if not c.session)
            checks = common + _checks(table, "checks file")
            self._cache[key] = tuple(c for c in checks if not c.session)
        return self._cache[key]

    def for_session(self, agent: str | None) -> tuple[Check, ...]:
        """The agent's checks of its sessions' conversations: code checks marked `session`
        and the checks of its table's `session` sub-table."""
        key = "\x01" + (agent or "")
        if key not in self._cache:
            table = self._table(agent)
            marked = [c for c in (*self.common, *_checks(table, "checks file")) if c.session]
            made = _checks(table.get("session") or {}, "checks file session")
            self._cache[key] = tuple(marked) + tuple(replace(c, session=True) for c in made)
        return self._cache[key]

    def _table(self, agent: str | None) -> dict[str, Any]:
        table = dict(self.default)
        table.update(for_agent(agent, self.agents) or {})
        return table

    def per_step(self, agent: str | None) -> tuple[Check, ...]:
        """The agent's checks marked to run on each new step (cached: asked on every step)."""
        key = "\x00" + (agent or "")
        if key not in self._cache:
            self._cache[key] = tuple(c for c in self.for_agent(agent) if c.per_step)
        return self._cache[key]

    @classmethod
    def read(cls, names: str = "", path: str = "", entry_points_on: bool = True) -> CheckBook:
        """From the settings: `names` (TRACEJUDGE_CHECKS), `path` (TRACEJUDGE_CHECKS_FILE)."""
        common = [code_check(n.strip(), "") for n in names.split(",") if n.strip()]
        if entry_points_on:
            for ep in entry_points(group=ENTRY_POINTS):
                common.append(code_check(ep.value, f"entry point {ep.name}"))
        default: dict[str, Any] = {}
        agents: tuple[tuple[str, dict[str, Any]], ...] = ()
        if path:
            default, agents = _read_file(Path(path))
        return cls(tuple(common), default, agents)


def _read_file(path: Path) -> tuple[dict[str, Any], tuple[tuple[str, dict[str, Any]], ...]]:
    where = f"checks file {path}"
    default, agents = split_tables(read_toml(path, "checks file", ChecksError), where, ChecksError)
    return _valid(default or {}, f"{where} [default]"), tuple(
        (name, _valid(table, f'{where} [agents."{name}"]')) for name, table in agents.items()
    )


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def _valid(table: Any, where: str, session: bool = False) -> dict[str, Any]:
    """The table, each entry checked (and every check in it built once, to find errors now);
    `session`: a `session` sub-table (no `on_step`, no `session` in it)."""
    if not isinstance(table, dict):
        raise ChecksError(f"{where}: must be a table of checks ({', '.join(KEYS)})")
    for key, value in table.items():
        if key == "session" and not session:
            if not isinstance(value, dict):
                raise ChecksError(f"{where}: session = {value!r}: {_SHAPES['session']}")
            _valid(value, f"{where}.session", session=True)
            continue
        if session and key in ("session", "on_step"):
            raise ChecksError(f"{where}: {key} has no meaning for a session's checks")
        shape_ok = {
            "code": _strings(value),
            "on_step": value in ("stop", "steer"),
            "never_call": _strings(value),
            "needs_confirmation": _strings(value),
            "final_must_match": _strings(value),
            "final_must_not_match": _strings(value),
            "call_before": isinstance(value, list)
            and all(_strings(p) and len(p) == 2 for p in value),
            "max_calls": isinstance(value, dict)
            and all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value.values()
            ),
        }.get(key)
        if shape_ok is None:
            raise ChecksError(f"{where}: unknown check {key!r}; known: {', '.join(KEYS)}")
        if not shape_ok:
            raise ChecksError(f"{where}: {key} = {value!r}: {_SHAPES[key]}")
        if key in FINAL:
            for pattern in value:
                try:
                    compile_pattern(pattern)
                except re2.error as exc:
                    said = (
                        exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
                    )
                    raise ChecksError(
                        f"{where}: {key}: /{pattern}/ does not compile with RE2 (linear time; "
                        f"no backreferences or lookaround): {said}"
                    ) from exc
    _checks(table, where)  # code checks imported now: a typo stops the start, not a run
    return dict(table)


_SHAPES = {
    "code": 'a list of "module:function"',
    "on_step": '"stop" or "steer"',
    "never_call": "a list of tool names",
    "needs_confirmation": "a list of tool names",
    "final_must_match": "a list of regular expressions",
    "final_must_not_match": "a list of regular expressions",
    "call_before": 'a list of pairs ["first", "then"]',
    "max_calls": "a table {tool = most calls}",
    "session": "a table of checks run on each session's conversation (the same keys)",
}


def _checks(table: dict[str, Any], where: str) -> tuple[Check, ...]:
    action = str(table.get("on_step", "steer"))
    made: list[Check] = [code_check(t, where) for t in table.get("code", [])]
    made += [declared(key, key, table[key], action) for key in (*PER_STEP, *FINAL) if key in table]
    return tuple(made)


def run_all(checks: Iterable[Check], run: Run) -> list[tuple[Check, Failure]]:
    """Every check on `run`, in order, for callers that need no time limit (tests, tools);
    the worker bounds each one (streams)."""
    return [(c, f) for c in checks for f in c.failures(run)]
