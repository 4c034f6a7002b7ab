"""Per-agent TOML files, one shape for all of them (budgets, checks, judge criteria): a
`[default]` table and `[agents."NAME-OR-PATTERN"]` tables, an agent's own table found by its
exact name first, then by the first fnmatch pattern in file order."""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def read_toml(path: Path, what: str, error: type[ValueError]) -> dict[str, Any]:
    """The file as TOML, or `error` naming it (`what`: e.g. "budgets file") and why."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"{what} {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} {path}: not TOML: {exc}") from exc


def split_tables(
    raw: dict[str, Any], where: str, error: type[ValueError]
) -> tuple[Any, dict[str, Any]]:
    """(the `default` table or None, the `agents` tables), or `error` naming what is wrong."""
    unknown = set(raw) - {"default", "agents"}
    if unknown:
        raise error(
            f"{where}: unknown table(s) {', '.join(sorted(unknown))}; "
            'expected [default] and [agents."NAME"]'
        )
    agents = raw.get("agents", {})
    if not isinstance(agents, dict):
        raise error(f'{where}: agents must be tables: [agents."NAME"]')
    return raw.get("default"), agents


def for_agent(agent: str | None, tables: Iterable[tuple[str, T]]) -> T | None:
    """The agent's table: the one named exactly for it, else the first pattern matching it."""
    if not agent:
        return None
    tables = tuple(tables)
    for name, table in tables:
        if name == agent:
            return table
    for name, table in tables:
        if fnmatch.fnmatchcase(agent, name):
            return table
    return None
