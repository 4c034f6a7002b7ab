"""Conversations judged as conversations: the records of a session's verdicts.

A session is the requests of one agent that share a `session_key` (each user turn of a chat is
a request). The worker that closes a request publishes its **turn** (the request's verdict and
its steps, masked and clipped) to the internal session-turns topic, keyed by the session; the
session agent keeps each session's turns, judges the conversation they make, and publishes a
**session verdict** on `tracejudge.sessions` at every revision: when a request of it closes,
when it ends (`session_end`, or TRACEJUDGE_SESSION_IDLE_S of quiet), and again when it resumes
after its verdict was final. Every revision is its own record: nothing is overwritten.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tracejudge.models.ids import stable_id
from tracejudge.models.outputs import Finding, Score

# what made a revision: a request of the session closed (one closing after a final verdict
# resumes the session), the session ended (`session_end`), it went quiet for the idle time, or
# the LLM judge's reading of its latest turn came
RevisionCause = Literal["turn", "resumed", "ended", "idle", "judged"]


def session_id(agent_name: str | None, session_key: str) -> str:
    """The session's identity: its key per agent (two agents' sessions may share a key), as a
    JSON pair: no name or key, whatever characters it holds, makes another agent's id."""
    return json.dumps([agent_name or "", session_key], ensure_ascii=False, separators=(",", ":"))


def of_session_id(sid: str) -> tuple[str | None, str]:
    """(agent name, session key) of a `session_id`."""
    agent, key = json.loads(sid)
    return (str(agent) or None), str(key)


def session_ref(agent_name: str | None, session_key: str) -> str:
    """Where the session's final verdict meets its outcomes in the agreement store, in place
    of a request id (an outcome with `subject` "session" is joined there)."""
    return "session:" + stable_id("session", session_id(agent_name, session_key))


def sessions_of(agent_name: str | None) -> str:
    """The agent name session verdicts are counted under in agreement and calibration: each
    agent's sessions apart from its requests (their scores mean other things)."""
    return f"{agent_name or '(none)'} [sessions]"


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SessionTurn(_Record):
    """One closed request of a session, as the session agent keeps it."""

    type: Literal["session_turn"] = "session_turn"
    session_key: str
    agent_name: str | None = None
    agent_version: str | None = None
    request_id: str
    evaluation_id: str
    opened_at: float = Field(description="When its first event came (epoch seconds).")
    closed_at: float
    overall_score: Score = Field(ge=0, le=100)
    overall_exact: float | None = None
    passed: bool
    success: bool
    incomplete: bool
    # the rules that fired on the request alone (names only): a generic answer, a hand-off
    findings: list[str] = Field(default_factory=list)
    # the request's task, steps and answer as contract events (dicts), texts masked and clipped
    # (judges/sessions/turns.py); an old turn of a long session keeps none (`events_dropped`)
    events: list[dict[str, Any]] = Field(default_factory=list)
    # steps of a long request left out of `events` (its first, last and failed ones are kept)
    steps_left_out: int = Field(default=0, ge=0)
    events_dropped: bool = False


class JudgeReading(_Record):
    """The LLM judge's reading of a session at a turn (`request_id`, the `turns`-th)."""

    request_id: str
    turns: int = Field(ge=1)
    llm_score: int | None = Field(default=None, ge=0, le=100)
    incomplete: bool | None = None
    summary: str = ""  # the judge's summary of the conversation so far: the next turn's start


class SessionMark(_Record):
    """Not a turn: the session ended (`session_end`), or the timer found it due (`idle`: quiet
    for the idle time, `grace`: ended but the request it named never came, `purge`: final and
    past its retention), or the LLM judge read its latest turn (`judged`). A mark is re-checked
    where the session's state is."""

    type: Literal["session_mark"] = "session_mark"
    mark: Literal["ended", "idle", "grace", "purge", "judged"]
    session_key: str
    agent_name: str | None = None
    at: float
    # `ended`: the session's last request, whose turn the final verdict waits for (None: none)
    request_id: str | None = None
    reason: str | None = None
    # `ended`: the session_end event's own time (the agent's clock, as its turns' `opened_at`):
    # a request opened before it and closing after is a late turn, not a resumption
    ts: float | None = None
    reading: JudgeReading | None = None  # `judged`: what the judge said


class TurnVerdict(_Record):
    """A turn as its session verdict lists it."""

    turn: int = Field(ge=1)
    request_id: str
    overall_score: Score = Field(ge=0, le=100)
    passed: bool
    success: bool
    incomplete: bool
    goal: str | None = Field(default=None, description="What the user asked (masked, clipped).")
    repeats: int | None = Field(
        default=None, description="The earlier turn whose request this one asks again."
    )


class SessionBlame(_Record):
    """Where the conversation went wrong: the turn (its request) and the step in it."""

    turn: int | None = None
    request_id: str | None = None
    step_index: int | None = Field(
        default=None, description="The step, in its request's numbering."
    )
    actor: str | None = None
    reason: str


class SessionVerdict(_Record):
    type: Literal["session_verdict"] = "session_verdict"
    verdict_id: str = Field(description="Deterministic: the session, its start and the revision.")
    evaluator_version: str
    session_key: str
    agent_name: str | None = None
    agent_version: str | None = Field(default=None, description="Its last turn's.")
    revision: int = Field(ge=1, description="1, 2, ...: each revision is its own record.")
    cause: RevisionCause
    cause_request_id: str | None = Field(
        default=None, description="The request whose turn made this revision (turn, resumed)."
    )
    final: bool = Field(description="Ended or idle; a later turn resumes it (a new revision).")
    opened_at: float
    overall_score: Score = Field(ge=0, le=100)
    overall_exact: float
    rule_score: Score = Field(ge=0, le=100, description="The rules' reading alone.")
    llm_score: Score | None = Field(
        default=None,
        ge=0,
        le=100,
        description="The LLM judge's, of the conversation up to its latest turn (None: not read).",
    )
    judge_status: Literal["ok", "pending", "fallback", "disabled"] = Field(
        default="disabled",
        description="ok: the judge's reading of the latest turn is blended in; pending: asked, "
        "a `judged` revision follows; fallback: it gave none, the rules decide; disabled.",
    )
    passed: bool
    warn_threshold: int = Field(ge=0, le=100)
    success: bool = Field(description="Every failed step of the conversation was made good.")
    incomplete: bool = Field(description="What the user came for is not done, as of the last turn.")
    turns: list[TurnVerdict]
    summary: str
    reasons: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    blame: SessionBlame | None = None
    unanswered_request_id: str | None = Field(
        default=None,
        description="The request of the session left undone (incomplete and never made good).",
    )
    ts: float

    @staticmethod
    def id_of(agent_name: str | None, session_key: str, opened_at: float, revision: int) -> str:
        return stable_id(
            "session", agent_name or "", session_key, f"{opened_at:.6f}", str(revision)
        )
