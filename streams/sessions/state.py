"""A session's state in the session agent's table: its turns, its last revision, whether its
verdict is final and what it waits for. One record per session, bounded in bytes."""

from __future__ import annotations

from pydantic import BaseModel, Field

from tracejudge.models.sessions import JudgeReading, SessionTurn

# the state is one changelog record: written at every turn, so bounded well under the broker's
# record limit (1 MiB by default) whatever the turns held
MAX_STATE_BYTES = 600_000


class SessionState(BaseModel):
    session_key: str
    agent_name: str | None = None
    opened_at: float  # its first turn's (or its end's, when the end came first)
    turns: list[SessionTurn] = Field(default_factory=list)
    revision: int = 0
    final: bool = False
    final_at: float | None = None
    last_at: float  # the last turn or end seen (worker clock)
    # a session_end that named a request whose turn had not come: made final when it comes,
    # or after TRACEJUDGE_SESSION_END_GRACE_S without it
    awaiting: str | None = None
    ended_at: float | None = None
    ended_ts: float | None = None  # the session_end's own time (the agent's clock)
    end_reason: str | None = None
    final_cause: str | None = None  # what made it final (ended, idle)
    last_passed: bool | None = None  # the last revision's: an alert is sent when it drops
    reflected: bool = False  # a reflection request went out for it (again once it resumes)
    # the LLM judge's last reading, and its summary of the conversation (the next turn's start)
    reading: JudgeReading | None = None
    summary: str | None = None
    turns_over_cap: int = 0  # turns past the cap that kept only their request and answer
    turns_forgotten: int = 0  # the oldest of those, forgotten past the byte bound

    def reading_now(self) -> JudgeReading | None:
        """The judge's reading when it read the turns as they are (none came since)."""
        r = self.reading
        if r is None or not self.turns or r.turns != len(self.turns):
            return None
        return r if r.request_id == self.turns[-1].request_id else None

    def encoded(self) -> bytes:
        return self.model_dump_json(exclude_defaults=True).encode("utf-8")

    @classmethod
    def decoded(cls, raw: bytes) -> SessionState:
        return cls.model_validate_json(raw)

    def add(self, turn: SessionTurn) -> str:
        """Put the turn in its place (by when it was asked); "same" for one already here with
        the same verdict (a record delivered again), "replaced" or "added" otherwise."""
        for n, had in enumerate(self.turns):
            if had.request_id == turn.request_id:
                if had.evaluation_id == turn.evaluation_id and had.closed_at <= turn.closed_at:
                    same = (had.overall_score, had.success, had.incomplete) == (
                        turn.overall_score,
                        turn.success,
                        turn.incomplete,
                    )
                    if same:
                        return "same"
                self.turns[n] = turn
                return "replaced"
        self.turns.append(turn)
        self.turns.sort(key=lambda t: (t.opened_at, t.closed_at, t.request_id))
        return "added"

    def bound(self, max_turns: int) -> None:
        """Past `max_turns` turns with steps, or past the byte bound, the oldest turns but the
        first (the conversation's opening request) keep only their request and answer; past
        the byte bound still, the oldest of those are forgotten (counted)."""
        detailed = [n for n, t in enumerate(self.turns) if not t.events_dropped]
        over = len(detailed) - max_turns
        size = len(self.encoded())
        for n in detailed[1:-1]:
            if over <= 0 and size <= MAX_STATE_BYTES:
                break
            turn = self.turns[n]
            kept = [e for e in turn.events if e.get("type") in ("task_started", "final_response")]
            self.turns[n] = turn.model_copy(update={"events": kept, "events_dropped": True})
            size -= len(turn.model_dump_json()) - len(self.turns[n].model_dump_json())
            over -= 1
            self.turns_over_cap += 1
        while size > MAX_STATE_BYTES and len(self.turns) > 2:
            size -= len(self.turns.pop(1).model_dump_json())
            self.turns_forgotten += 1
