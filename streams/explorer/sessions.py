"""The explorer's sessions: each session's verdict revisions, as read from the sessions topic.

Every revision is kept in order (the topic and Redis keep them all; here, the last
`MAX_REVISIONS` of each of the last `capacity` sessions to change), so the session page shows
the conversation's verdicts over time and not only its latest.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

MAX_REVISIONS = 500


@dataclass
class Session:
    agent: str | None
    key: str
    revisions: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def latest(self) -> dict[str, Any]:
        return self.revisions[max(self.revisions)]

    def in_order(self) -> list[dict[str, Any]]:
        return [self.revisions[n] for n in sorted(self.revisions)]


class SessionBook:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._sessions: OrderedDict[tuple[str | None, str], Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def add(self, verdict: dict[str, Any]) -> None:
        """One revision; a revision read again (the same number) replaces nothing it had."""
        key, agent, revision = (
            verdict["session_key"],
            verdict.get("agent_name"),
            verdict["revision"],
        )
        if not isinstance(key, str) or not isinstance(revision, int) or isinstance(revision, bool):
            raise ValueError("a session verdict needs a session_key and a revision number")
        if agent is not None and not isinstance(agent, str):
            raise ValueError("agent_name is not a string")
        session = self._sessions.pop((agent, key), None) or Session(agent, key)
        session.revisions.setdefault(revision, verdict)
        while len(session.revisions) > MAX_REVISIONS:
            del session.revisions[min(session.revisions)]
        self._sessions[(agent, key)] = session  # the latest to change, last
        while len(self._sessions) > self.capacity:
            self._sessions.popitem(last=False)

    def get(self, agent: str | None, key: str) -> Session | None:
        return self._sessions.get((agent, key))

    def newest(self, agent: str = "") -> list[Session]:
        found = reversed(self._sessions.values())
        return [s for s in found if not agent or (s.agent or "") == agent]
