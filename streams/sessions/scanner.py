"""The session agent's timer: sessions due a mark (idle, an end's grace over, past retention).

Tables change only in stream iteration, so the timer never touches the session-state table:
it sends a mark keyed (and partitioned) like the session into the session-turns topic, and the
session agent re-checks it in-stream (`SessionHandler.on_mark`): a turn may have come since.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from tracejudge.models.sessions import SessionMark, of_session_id
from tracejudge.streams.sessions.handler import SessionHandler
from tracejudge.streams.sessions.state import SessionState
from tracejudge.streams.shared.outputs import Channel

log = logging.getLogger(__name__)


@dataclass
class SessionScanner:
    handler: SessionHandler
    turns: Channel
    clock: Callable[[], float]
    # the assignment `due` was rebuilt for (see `reindex`); None: never
    indexed_for: int | None = None

    def reindex(self, assignment: int) -> int:
        """After a rebalance and the table's recovery: what is due, from the table's sessions
        (read in from the changelog, so not in `due` yet). A mark for a session another worker
        owns now goes to its partition all the same, and is re-checked there."""
        handler = self.handler
        handler.due.clear()
        for sid, raw in list(handler.table.items()):
            handler.remember(sid, SessionState.decoded(raw))
        self.indexed_for = assignment
        return len(handler.due)

    async def scan(self) -> None:
        now = self.clock()
        try:
            for sid, mark in self.handler.due.due(now):
                agent, key = of_session_id(sid)
                value = SessionMark(
                    mark=mark,  # type: ignore[arg-type]
                    session_key=key,
                    agent_name=agent,
                    at=now,
                )
                # keyed like the session's turns: the same partition, so the same owner
                await self.turns.send(
                    key=sid.encode("utf-8"), value=value.model_dump_json().encode("utf-8")
                )
        except Exception:
            # the next tick tries again: marks are re-checked in-stream
            self.handler.metrics.counts["timer_errors"] += 1
            log.exception("session scan failed")
