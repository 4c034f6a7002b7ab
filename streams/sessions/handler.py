"""The session agent's handler: turns and marks in, session verdict revisions out.

Records come from the session-turns topic, keyed by session (agent and `session_key`), so one
session's records are handled in order by one worker; its state is one record of the
session-state table (`state.py`), changed only here, in stream iteration. Each revision is
published on `tracejudge.sessions` and kept in Redis under its number; nothing is overwritten.
A record delivered again finds its turn already there and makes no revision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import ValidationError

from tracejudge.judges.agreement.tally import Kept, View
from tracejudge.judges.checks.book import CheckBook
from tracejudge.judges.checks.view import run_of
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.sessions.judge import (
    SessionJudgment,
    conversation_of,
    judge_session,
    unanswered,
)
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.judges.verdict.encoded import encode
from tracejudge.models import names
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import decode_object
from tracejudge.models.ids import stable_id
from tracejudge.models.outputs import Alert, ReflectionRequest
from tracejudge.models.sessions import (
    RevisionCause,
    SessionMark,
    SessionTurn,
    SessionVerdict,
    session_id,
    session_ref,
    sessions_of,
)
from tracejudge.streams.agreement.store import AgreementStore, AgreementUnavailable
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.sessions.due import DueMarks
from tracejudge.streams.sessions.reader import SessionReader
from tracejudge.streams.sessions.state import SessionState
from tracejudge.streams.shared.commit import later
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import Channel, Lookup, deliver
from tracejudge.streams.worker.checks import CheckRunner

log = logging.getLogger(__name__)

JudgeStatus = Literal["ok", "pending", "fallback", "disabled"]
MAX_RECORD_BYTES = 2_000_000  # a turn is a bounded request: anything past this is not ours


@dataclass(frozen=True)
class SessionTimes:
    idle_s: float
    grace_s: float
    retention_s: float
    max_turns: int


@dataclass
class SessionOutputs:
    sessions: Channel
    alerts: Channel
    reflections: Channel
    lookup: Lookup
    # where final session verdicts meet their outcomes (None: no Redis, no agreement)
    agreement: AgreementStore | None = None


@dataclass
class SessionHandler:
    table: MutableMapping[str, bytes]
    outputs: SessionOutputs
    times: SessionTimes
    policy: Policy
    version: str
    metrics: Metrics
    clock: Callable[[], float]
    # when each session's next mark is due: what the timer reads
    due: DueMarks = field(default_factory=DueMarks)
    rules: RuleJudge = field(default_factory=RuleJudge)
    # a team's session checks, and what runs them within their time limit (None: none)
    checks: CheckBook | None = None
    check_runner: CheckRunner | None = None
    # the LLM judge's reading of each new turn (None: rules only)
    reader: SessionReader | None = None

    async def __call__(self, record: InRecord) -> None:
        data = decode_object(record.value, MAX_RECORD_BYTES)
        try:
            if data.get("type") == "session_turn":
                await self.on_turn(SessionTurn.model_validate(data))
            elif data.get("type") == "session_mark":
                await self.on_mark(SessionMark.model_validate(data))
            else:
                raise InvalidEvent("unknown_type", "not a session turn or mark")
        except ValidationError as exc:
            raise InvalidEvent("invalid", str(exc).splitlines()[0][:200]) from None

    def _load(self, sid: str) -> SessionState | None:
        raw = self.table.get(sid)
        return None if raw is None else SessionState.decoded(raw)

    def _save(self, sid: str, state: SessionState) -> None:
        self.table[sid] = state.encoded()
        self.remember(sid, state)

    def remember(self, sid: str, state: SessionState) -> None:
        """When the session's next mark is due, for the timer."""
        if state.final:
            self.due.set(sid, (state.final_at or state.last_at) + self.times.retention_s, "purge")
        elif state.awaiting is not None:
            self.due.set(sid, (state.ended_at or state.last_at) + self.times.grace_s, "grace")
        else:
            self.due.set(sid, state.last_at + self.times.idle_s, "idle")

    async def on_turn(self, turn: SessionTurn) -> None:
        now = self.clock()
        sid = session_id(turn.agent_name, turn.session_key)
        state = self._load(sid) or SessionState(
            session_key=turn.session_key,
            agent_name=turn.agent_name,
            opened_at=turn.opened_at,
            last_at=now,
        )
        status = state.add(turn)
        self.metrics.session_turns.labels(status).inc()
        if status == "same":
            return  # delivered again: the revision it made was published
        cause: RevisionCause = "turn"
        state.last_at = now
        if state.final and state.ended_ts is not None and turn.opened_at <= state.ended_ts:
            # asked before the session ended, closed after (on another partition, or slower):
            # a late turn of the ended session, which stays final
            cause = "ended"
        elif state.final:  # the user came back: the session is open again
            cause, state.final, state.final_at, state.final_cause = "resumed", False, None, None
            state.ended_at = state.ended_ts = state.end_reason = None
            state.reflected = False
        if state.awaiting == turn.request_id:  # the end was waiting for this turn
            cause, state.awaiting = "ended", None
            state.final, state.final_at, state.final_cause = True, now, "ended"
        state.opened_at = min(state.opened_at, turn.opened_at)
        state.bound(self.times.max_turns)
        await self._revise(sid, state, cause, turn.request_id, ask=self.reader is not None)

    async def on_mark(self, mark: SessionMark) -> None:
        now = self.clock()
        sid = session_id(mark.agent_name, mark.session_key)
        state = self._load(sid)
        if mark.mark == "ended":
            await self._ended(sid, state, mark, now)
            return
        if state is None:
            self.due.pop(sid)
            return
        if mark.mark == "judged":
            await self._judged(sid, state, mark)
            return
        if mark.mark == "purge":
            if state.final and now - (state.final_at or now) >= self.times.retention_s:
                del self.table[sid]
                self.due.pop(sid)
                self.metrics.counts["sessions_purged"] += 1
            return
        if state.final:
            return
        if mark.mark == "grace" and state.awaiting is not None:
            if now - (state.ended_at or now) < self.times.grace_s:
                return
            state.awaiting = None
            await self._finish(sid, state, "ended", now)
        elif mark.mark == "idle" and state.awaiting is None:
            if now - state.last_at < self.times.idle_s:
                self._save(sid, state)  # a turn came since: due later
                return
            await self._finish(sid, state, "idle", now)

    async def _judged(self, sid: str, state: SessionState, mark: SessionMark) -> None:
        """The judge read a turn: its summary is the conversation's from now on; a revision
        follows when the turn it read is still the latest (else a newer reading is coming)."""
        reading = mark.reading
        if reading is None:
            return
        state.summary = reading.summary or state.summary
        state.reading = reading
        if state.reading_now() is None:
            self._save(sid, state)
            return
        await self._revise(sid, state, "judged", reading.request_id)

    async def close_all(self) -> None:
        """Every session not final made final, as the idle time (or an end's grace) would:
        the end of a replay, whose recorded sessions have no later time to go quiet in."""
        now = self.clock()
        for sid, raw in list(self.table.items()):
            state = SessionState.decoded(raw)
            if not state.final:
                cause: RevisionCause = "ended" if state.awaiting is not None else "idle"
                state.awaiting = None
                await self._finish(sid, state, cause, now)

    async def _ended(
        self, sid: str, state: SessionState | None, mark: SessionMark, now: float
    ) -> None:
        if state is None:
            if mark.request_id is None:
                self.metrics.counts["session_ends_unknown"] += 1
                return
            # the end came before any turn (its request closes on another partition): kept
            # waiting for that turn, for the grace time
            state = SessionState(
                session_key=mark.session_key,
                agent_name=mark.agent_name,
                opened_at=mark.at,
                last_at=now,
            )
        if state.final:
            return  # ended already (this end delivered again, or a second end)
        state.ended_at, state.ended_ts, state.end_reason = now, mark.ts or now, mark.reason
        known = {t.request_id for t in state.turns}
        if mark.request_id is not None and mark.request_id not in known:
            state.awaiting = mark.request_id
            self._save(sid, state)
            return
        await self._finish(sid, state, "ended", now)

    async def _finish(
        self, sid: str, state: SessionState, cause: RevisionCause, now: float
    ) -> None:
        if not state.turns:  # ended before any turn came, and none came in the grace time
            del self.table[sid]
            self.due.pop(sid)
            self.metrics.counts["session_ends_without_turns"] += 1
            return
        state.final, state.final_at, state.last_at, state.final_cause = True, now, now, cause
        await self._revise(sid, state, cause, None)

    async def _revise(
        self,
        sid: str,
        state: SessionState,
        cause: RevisionCause,
        request_id: str | None,
        ask: bool = False,
    ) -> None:
        """A new revision; `ask`: the judge reads the latest turn (the revision says pending
        when it will; a `judged` revision follows)."""
        state.revision += 1
        asked = ask and self.reader is not None and self.reader.ask(sid, state)
        verdict = await self.verdict(state, cause, request_id, pending=asked)
        was_passing = state.last_passed
        state.last_passed = verdict.passed
        reflection = None if state.reflected else self._reflection(verdict, state)
        state.reflected = state.reflected or reflection is not None  # once per ending
        self._save(sid, state)
        agent = self.metrics.agents.agent_label(state.agent_name)
        self.metrics.session_verdicts.labels(agent, cause, str(verdict.passed).lower()).inc()
        await later(self._publish(sid, verdict, was_passing, reflection))

    async def verdict(
        self,
        state: SessionState,
        cause: RevisionCause,
        request_id: str | None,
        pending: bool = False,
    ) -> SessionVerdict:
        conversation = conversation_of(state.session_key, state.turns)
        checks = () if self.checks is None else self.checks.for_session(state.agent_name)
        checked = None
        if checks and self.check_runner is not None:  # behind the wall, within their limit
            checked = await self.check_runner.run(checks, run_of(conversation[0]))
        judged = judge_session(
            state.session_key, state.turns, self.rules, conversation=conversation, checked=checked
        )
        # the threshold of the agent's sessions: calibrated from their outcomes when it is
        threshold, _ = self.policy.threshold_for(sessions_of(state.agent_name))
        status, llm_score, blended, incomplete = self._blend(state, judged, pending)
        exact = int(blended * 10) / 10  # cut to a tenth, as overall_exact is
        reasons = list(judged.reasons)
        if state.end_reason and cause == "ended":
            reasons.append(f"ended: {state.end_reason}")
        long = sum(t.steps_left_out for t in state.turns)
        if long:
            reasons.append(
                f"{long} step(s) of long requests left out of the conversation's reading"
            )
        if state.turns_over_cap:
            reasons.append(
                f"{state.turns_over_cap} older turn(s) kept only their request and answer"
            )
        return SessionVerdict(
            verdict_id=SessionVerdict.id_of(
                state.agent_name, state.session_key, state.opened_at, state.revision
            ),
            evaluator_version=self.version,
            session_key=state.session_key,
            agent_name=state.agent_name,
            agent_version=state.turns[-1].agent_version,
            revision=state.revision,
            cause=cause,
            cause_request_id=request_id,
            final=state.final,
            opened_at=state.opened_at,
            overall_score=max(0, min(100, round(blended))),
            overall_exact=exact,
            rule_score=max(0, min(100, round(judged.exact))),
            llm_score=llm_score,
            judge_status=status,
            passed=exact >= threshold,
            warn_threshold=threshold,
            success=judged.success,
            incomplete=incomplete,
            turns=judged.turns,
            summary=judged.summary,
            reasons=reasons,
            findings=judged.findings,
            blame=judged.blame,
            # the judge may find undone what the rules did not: the request it names then
            unanswered_request_id=(
                judged.unanswered_request_id or (unanswered(state.turns) if incomplete else None)
            ),
            ts=self.clock(),
        )

    def _blend(
        self, state: SessionState, judged: SessionJudgment, pending: bool
    ) -> tuple[JudgeStatus, int | None, float, bool]:
        """(judge status, its score, the score, incomplete): the judge's reading of the turns
        as they are blended in as a request's is (`rule_weight`); it decides `incomplete`, never
        `success` (the steps' facts), and never lifts a session a team's check failed."""
        if self.reader is None:
            return "disabled", None, judged.exact, judged.incomplete
        reading = state.reading_now()
        if reading is None:
            status: JudgeStatus = "pending" if pending else "fallback"
            return status, None, judged.exact, judged.incomplete
        if reading.llm_score is None:
            return "fallback", None, judged.exact, judged.incomplete
        weight = self.policy.rule_weight
        blended = weight * judged.exact + (1 - weight) * reading.llm_score
        if judged.failed_check:
            blended = min(blended, judged.exact)
        incomplete = judged.incomplete if reading.incomplete is None else reading.incomplete
        return "ok", reading.llm_score, blended, incomplete

    async def _publish(
        self,
        sid: str,
        verdict: SessionVerdict,
        was_passing: bool | None,
        reflection: ReflectionRequest | None,
    ) -> None:
        value = encode(verdict)
        out = self.outputs
        await deliver(out.sessions, verdict.session_key.encode("utf-8"), value)
        if was_passing is not False and not verdict.passed:
            await deliver(out.alerts, verdict.session_key.encode("utf-8"), encode(_alert(verdict)))
            self.metrics.counts["session_alerts"] += 1
        if reflection is not None:
            await deliver(
                out.reflections, reflection.request_id.encode("utf-8"), encode(reflection)
            )
            self.metrics.counts["session_reflections"] += 1
        key = stable_id("session", sid)
        revision_key = names.REDIS_SESSION_REVISION_KEY.format(
            session=key, revision=verdict.revision
        )
        await out.lookup.put_encoded(revision_key, value, only_new=True)
        await out.lookup.put_encoded(names.REDIS_SESSION_KEY.format(session=key), value)
        if verdict.final and out.agreement is not None:
            await self._keep(out.agreement, verdict)

    async def _keep(self, agreement: AgreementStore, verdict: SessionVerdict) -> None:
        """A final session verdict kept for its outcomes (`subject` "session"), counted under
        the agent's sessions (`sessions_of`): agreement and calibration per agent, apart from
        its requests'. A later final revision (a late turn) replaces it."""
        threshold = verdict.warn_threshold
        view = View.of(verdict.overall_exact, threshold, verdict.success, verdict.incomplete)
        kept = Kept(
            agent=sessions_of(verdict.agent_name),
            version=verdict.agent_version,
            threshold=threshold,
            rules=view,
            findings=tuple(dict.fromkeys(f.rule for f in verdict.findings)),
            ts=verdict.ts,
            score=verdict.overall_score,
            success=verdict.success,
            incomplete=verdict.incomplete,
        )
        try:
            await agreement.keep(session_ref(verdict.agent_name, verdict.session_key), kept)
        except AgreementUnavailable:  # the verdict is out; its agreement is best effort
            self.metrics.counts["session_keep_failed"] += 1

    def _reflection(self, verdict: SessionVerdict, state: SessionState) -> ReflectionRequest | None:
        """A final session left undone whose turns each looked done alone: no request's own
        verdict asked for a reflection, so the session asks, naming its unanswered request.
        Where a turn was incomplete or failed its own reflection request was sent already."""
        if not (verdict.final and verdict.incomplete and self.policy.reflection_enabled):
            return None
        if verdict.unanswered_request_id is None:
            return None
        if any(t.incomplete or not t.success for t in state.turns):
            return None
        (turn,) = [t for t in state.turns if t.request_id == verdict.unanswered_request_id]
        goal = next(
            (str(e.get("goal") or "") for e in turn.events if e.get("type") == "task_started"),
            "",
        )
        return ReflectionRequest(
            reflection_id=stable_id("reflection", verdict.verdict_id),
            evaluation_id=verdict.verdict_id,
            request_id=turn.request_id,
            session_key=verdict.session_key,
            agent_name=verdict.agent_name,
            goal=goal or verdict.summary,
            summary=f"The conversation did not get the user what they asked: {verdict.summary}",
            blame=None,
            suggestions=["finish what the conversation left undone, as of its last turn"],
            reflection_round=1,
            ts=verdict.ts,
        )


def _alert(verdict: SessionVerdict) -> Alert:
    return Alert.of(
        "session_low_score",
        verdict.verdict_id,
        "warning",
        f"session {verdict.session_key} of {verdict.agent_name or 'an agent'} dropped to "
        f"{verdict.overall_exact:g} (threshold {verdict.warn_threshold}) at revision "
        f"{verdict.revision} ({verdict.cause}): {verdict.summary}",
        verdict.ts,
        request_id=verdict.cause_request_id or verdict.unanswered_request_id,
        session_id=verdict.session_key,
    )
