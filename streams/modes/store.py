"""Each agent's failure modes in the mode-state table, a record per part: the agent's counts
under the JSON list `[agent]`, each of its modes under `[agent, key]`. A run writes the
agent's counts and its own mode (a few kilobytes), not every mode of its agent: an agent with
a hundred modes was a write of 200 kB per verdict as one record.

Only the modes agent, in stream iteration, writes them. They are read once into memory (the
first record after an assignment) and kept: this worker is their only writer while it owns
their partition; `clear()` at a revocation makes the next record read them again.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping

from tracejudge.judges.modes.watch import AgentModes, ModeCounts


def agent_key(agent: str) -> str:
    return json.dumps([agent], ensure_ascii=False)


def mode_key(agent: str, key: str) -> str:
    return json.dumps([agent, key], ensure_ascii=False)


class ModeStore:
    def __init__(self, table: MutableMapping[str, bytes]) -> None:
        self.table = table
        self._agents: dict[str, AgentModes] | None = None
        # the minute of each agent's counts last written (its last verdict's at that time)
        self._saved: dict[str, int] = {}

    def saved_minute(self, agent: str) -> int | None:
        return self._saved.get(agent)

    def clear(self) -> None:
        self._agents = None
        self._saved.clear()

    def agents(self) -> dict[str, AgentModes]:
        """Every agent's modes this worker holds (read from the table the first time)."""
        if self._agents is None:
            self._agents = self._read()
        return self._agents

    def get(self, agent: str) -> AgentModes | None:
        return self.agents().get(agent)

    def save(self, agent: str, modes: AgentModes) -> None:
        self.table[agent_key(agent)] = modes.model_dump_json(
            exclude={"modes"}, exclude_defaults=True
        ).encode("utf-8")
        for key in modes.changed:
            counts = modes.modes.get(key)
            if counts is not None:
                self.table[mode_key(agent, key)] = counts.model_dump_json(
                    exclude_defaults=True
                ).encode("utf-8")
        for key in modes.gone - set(modes.modes):
            if mode_key(agent, key) in self.table:
                del self.table[mode_key(agent, key)]
        modes.changed.clear()
        modes.gone.clear()
        self.agents()[agent] = modes
        self._saved[agent] = max(modes.total, default=0)

    def drop(self, agent: str) -> None:
        """An agent with nothing left in its history: its records go."""
        modes = self.agents().pop(agent, None)
        self._saved.pop(agent, None)
        known = set() if modes is None else {*modes.modes, *modes.gone}
        for key in [agent_key(agent), *(mode_key(agent, k) for k in known)]:
            if key in self.table:
                del self.table[key]

    def _read(self) -> dict[str, AgentModes]:
        agents: dict[str, AgentModes] = {}
        parts: dict[str, dict[str, ModeCounts]] = {}
        for key, raw in list(self.table.items()):
            where = json.loads(key)
            if len(where) == 1:
                agents[where[0]] = AgentModes.model_validate_json(raw)
            else:
                parts.setdefault(where[0], {})[where[1]] = ModeCounts.model_validate_json(raw)
        for agent, modes in parts.items():
            held = agents.get(agent)
            if held is None:  # its counts not there (never, but a table is data): start them
                first = min(m.first_seen for m in modes.values())
                held = agents[agent] = AgentModes(agent_name=agent or None, since=first)
            held.modes.update(modes)
            held.swept = 0  # buckets kept past the history are cut at the next run
        return agents
