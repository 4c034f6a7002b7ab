"""Closing a window: its records read in-stream, the closed marker written; the verdict (or a
job for the LLM judge stage) made and published after, while the agent goes on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracejudge.judges.checks.book import CheckBook
from tracejudge.judges.checks.view import run_of
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.sessions.turns import turn_of
from tracejudge.judges.verdict.make import Closing, Judging, make_verdict, window_for
from tracejudge.models.agents import group_of
from tracejudge.models.outputs import Evaluation
from tracejudge.models.sessions import session_id
from tracejudge.models.window import ClosedBy, Window
from tracejudge.streams.shared.commit import Held, later
from tracejudge.streams.shared.outputs import Channel, VerdictPublisher, deliver
from tracejudge.streams.worker.checks import CheckRunner
from tracejudge.streams.worker.windows import WindowStore, fired_of


@dataclass
class WindowCloser:
    store: WindowStore
    judging: Judging
    publisher: VerdictPublisher
    judge_requests: Channel
    clock: Callable[[], float]
    # a team's checks, and what runs them within their time limit (None: no checks anywhere)
    checks: CheckBook | None = None
    check_runner: CheckRunner | None = None
    # where a closed request of a session goes as its turn (None: sessions off)
    session_turns: Channel | None = None

    def __post_init__(self) -> None:
        self.rules = RuleJudge(tool_call_budget=self.judging.tool_call_budget)

    async def close(
        self,
        request_id: str,
        closed_by: ClosedBy,
        terminal_at: float | None = None,
        offset: int | None = None,
    ) -> None:
        """Close and judge; `terminal_at` (the terminal event's broker timestamp) times the
        verdict, `offset` is the closing record's."""
        now = self.clock()
        meta, records = self.store.stored(request_id)
        first_close = self.store.is_open(request_id)
        stats = self.store.run_stats(request_id, records)
        group = group_of(stats.agent_name)
        book = self.store.baselines
        closing = Closing(
            request_id,
            closed_by,
            records,
            meta.step_count,
            meta.steps_dropped,
            [(str(a), int(i)) for a, i in meta.early_stops],
            now,
            terminal_at,
            stats,
            None if book is None else book.norms(group),
            fired_of(meta),
            meta.over_cap,
        )
        # The marker goes now, the steps once the outputs are acknowledged: the closing record,
        # delivered again after a crash, finds them and publishes again (same evaluation_id).
        count, held = self.store.close(request_id, closed_by, now, offset)
        if book is not None and first_close:  # a run closed again was learned the first time
            book.observe(group, meta.partition, stats, now)
        self.publisher.metrics.counts[f"closed_by_{closed_by}"] += 1
        self.publisher.metrics.windows_closed.labels(closed_by).inc()
        await later(self._publish(closing, count, held))

    async def _publish(self, closing: Closing, count: int, held: Held | None) -> None:
        checks = (
            ()
            if self.checks is None
            else self.checks.for_agent(closing.stats.agent_name if closing.stats else None)
        )
        # built once for the checks, the judges and the session's turn alike; with neither
        # checks nor sessions nothing is added
        window = window_for(closing) if checks or self.session_turns is not None else None
        if checks and self.check_runner is not None and window is not None:
            checked = await self.check_runner.run(checks, run_of(window))
            made = make_verdict(self.judging, closing, self.rules, window, checked)
        else:
            made = make_verdict(self.judging, closing, self.rules, window)
        if made.evaluation is not None:  # final, or pending the judge's
            await self.publisher.publish(made, closing.terminal_at)
            # a request of a session: its turn
            turns = self.session_turns
            if window is not None and turns is not None and window.first("session_key"):
                evaluation = Evaluation.model_validate_json(made.evaluation)
                await self._turn(window, evaluation, closing.now)
        if made.job is not None:
            # the judge runs in its own consumer: the agent goes on closing windows meanwhile
            await deliver(self.judge_requests, closing.request_id.encode(), made.job)
            self.publisher.metrics.counts["judge_queued"] += 1
        self.store.forget_steps(closing.request_id, count)
        if held is not None:  # the window's held input records may be acknowledged now
            held.release()

    async def _turn(self, window: Window, evaluation: Evaluation, now: float) -> None:
        """The request as a turn of its session, to the session agent (keyed by session). The
        rules' verdict of the request: where the LLM judge's comes later, the session is judged
        with the rules' (the session's own verdict reads the whole conversation)."""
        assert self.session_turns is not None and evaluation.session_key is not None
        times = [e.ts for e in (window.task, *window.steps, window.final) if e and e.ts]
        turn = turn_of(window, evaluation, min(times, default=now), now)
        key = session_id(turn.agent_name, turn.session_key).encode("utf-8")
        await deliver(self.session_turns, key, turn.model_dump_json().encode("utf-8"))
        self.publisher.metrics.counts["session_turns_sent"] += 1
