"""The LLM judge's reading of a session's latest turn, off the session agent's path.

A revision made by a turn goes out at once with the rules' verdict (`judge_status` pending);
the judge reads the turn with the summary of the conversation before it (its own summary of the
turns it read: judges/sessions/judge_input.py) in a task of its own, bounded in number, through
the request judge's stage (its client, call slots, rate limits, cache and spend budget). What it
says goes back through the session-turns topic as a `judged` mark, so the session's state
changes only in stream iteration; a reading of a turn that is no longer the latest only moves
the summary on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from tracejudge.judges.llm.answer import JudgeAnswer
from tracejudge.judges.llm.client import CallRecord, JudgeError
from tracejudge.judges.llm.criteria import with_criteria
from tracejudge.judges.llm.prompt import cache_key
from tracejudge.judges.sessions.judge_input import rolling, session_input
from tracejudge.models.sessions import JudgeReading, SessionMark
from tracejudge.streams.judge.stage import JudgeStage
from tracejudge.streams.sessions.state import SessionState
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import Channel, deliver

log = logging.getLogger(__name__)

IN_FLIGHT = 64  # readings at once at most: past it a turn is left to the rules (counted)


@dataclass
class SessionReader:
    stage: JudgeStage
    turns: Channel  # where a reading goes back, as a mark keyed by its session
    max_chars: int | None  # None: the token budget alone
    max_tokens: int | None
    metrics: Metrics
    clock: Callable[[], float]
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def ask(self, sid: str, state: SessionState) -> bool:
        """Read the session's latest turn; False when too many readings are in flight."""
        if len(self.tasks) >= IN_FLIGHT:
            self.metrics.counts["session_readings_skipped"] += 1
            return False
        turn = state.turns[-1]
        content = session_input(
            state.session_key,
            turn,
            len(state.turns),
            state.summary,
            self.max_chars,
            self.max_tokens,
        ).content
        reading = JudgeReading(request_id=turn.request_id, turns=len(state.turns))
        mark = SessionMark(
            mark="judged", session_key=state.session_key, agent_name=state.agent_name, at=0.0
        )
        task = asyncio.ensure_future(self._read(sid, mark, reading, content))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

    async def _read(self, sid: str, mark: SessionMark, reading: JudgeReading, content: str) -> None:
        try:
            answer = await self._answer(mark.agent_name, content)
        except Exception:  # whatever went wrong, the rules' verdict stands
            log.exception("session judge reading failed")
            answer = None
        if answer is not None:
            verdict = answer.has_verdict
            reading = reading.model_copy(
                update={
                    "llm_score": answer.llm_score,
                    "incomplete": answer.incomplete if verdict else None,
                    "summary": rolling(answer.summary),
                }
            )
        self.metrics.counts[f"session_readings_{'ok' if answer else 'fallback'}"] += 1
        done = mark.model_copy(update={"at": self.clock(), "reading": reading})
        try:
            await deliver(self.turns, sid.encode("utf-8"), done.model_dump_json().encode())
        except Exception:  # the broker away: the session keeps the rules' verdict
            self.metrics.counts["session_readings_lost"] += 1
            log.warning("a session judge reading could not be sent back", exc_info=True)

    async def _answer(self, agent: str | None, content: str) -> JudgeAnswer | None:
        stage = self.stage
        prompt = with_criteria(stage.prompt, stage.criteria.for_agent(agent))
        key = cache_key(content, prompt, stage.settings.llm_model)
        cached = await stage.cache.get(key)
        if cached is not None:
            return cached
        if await stage.budget.spent() is not None:
            return None
        record = CallRecord()
        try:
            answer, _ = await stage.client.judge_recorded(content, record, prompt)
        except JudgeError as exc:
            log.info("session judge fallback: %s", exc.code)
            return None
        finally:
            tokens = record.tokens
            if tokens is not None:
                cost = None if stage.prices is None else stage.prices.cost(tokens)
                await stage.budget.charge(tokens.input + tokens.output, cost)
        await stage.cache.put(key, answer)
        return answer

    async def drain(self) -> None:
        """Wait for the readings in flight (a replay's end, tests)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
