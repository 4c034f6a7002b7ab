"""How an agent's verdicts agree with its outcomes, and what came of the actions tracejudge
asked of it, for the explorer's agent page.

Both come from the workers' store in Redis (`tally()`: every worker's and judge process's pairs;
`action_tally()`: every process's action counts, as `tracejudge status` reads them), each read
by a `TallyReader` at most every REFRESH_S seconds and never waited for longer than WAIT_S on a
page: a slow or absent Redis makes the page show the last figures read (or say they are being
read), never hang."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Generic, Literal, TypeVar

from redis.exceptions import RedisError

from tracejudge.judges.agreement.action_effects import ActionFigures, ActionTally, SteerFigures
from tracejudge.judges.agreement.tally import DIMENSION_PREFIX, Figures, Share, Tally, views_of
from tracejudge.settings import Settings
from tracejudge.streams.agreement.live import agreement_store
from tracejudge.streams.agreement.store import AgreementUnavailable, RedisAgreementStore
from tracejudge.streams.explorer.reliability import reliability_plot
from tracejudge.streams.shared.outputs import redis_client

log = logging.getLogger(__name__)

REFRESH_S = 30.0  # a tally sums day buckets of every agent: not on every page view
WAIT_S = 1.0  # the longest a page waits for a read under way
READ_TIMEOUT_S = 10.0  # a read taking longer is given up (and tried again at the next refresh)

State = Literal["off", "reading", "up", "down"]
T = TypeVar("T")


@dataclass(frozen=True)
class Reading(Generic[T]):
    """The last tally read (None before the first), and how the store stood then."""

    tally: T | None
    state: State  # off: no store; reading: the first read under way; down: the last read failed
    at: float = 0.0  # when `tally` was read (time.time())


class TallyReader(Generic[T]):
    """A tally as last read, refreshed in the background at most every `every_s`."""

    what = "tally"  # for the log line of a failed read

    def __init__(
        self,
        read: Callable[[], Awaitable[T]] | None,
        every_s: float = REFRESH_S,
        wait_s: float = WAIT_S,
        timeout_s: float = READ_TIMEOUT_S,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._read, self._close = read, close
        self.every_s, self.wait_s, self.timeout_s = every_s, wait_s, timeout_s
        self._reading: Reading[T] = Reading(None, "off" if read is None else "reading")
        self._last = -float("inf")  # time.monotonic() of the last read's start
        self._task: asyncio.Task[None] | None = None

    async def current(self) -> Reading[T]:
        if self._read is None:
            return self._reading
        if self._task is None and time.monotonic() - self._last >= self.every_s:
            self._last = time.monotonic()
            self._task = asyncio.create_task(self._refresh(self._read))
        if self._task is not None:
            # shielded: a page that stops waiting leaves the read to finish for the next one
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), self.wait_s)
        return self._reading

    async def _refresh(self, read: Callable[[], Awaitable[T]]) -> None:
        try:
            tally = await asyncio.wait_for(read(), self.timeout_s)
            self._reading = Reading(tally, "up", time.time())
        except (AgreementUnavailable, OSError, RedisError, TimeoutError, ValueError) as exc:
            log.warning("explorer: reading the %s failed: %s", self.what, exc)
            self._reading = replace(self._reading, state="down")
        finally:
            self._task = None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._close is not None:
            await self._close()


def _workers_store(
    settings: Settings,
) -> tuple[RedisAgreementStore, Callable[[], Awaitable[None]]] | None:
    """The workers' store in the Redis of TRACEJUDGE_REDIS_URL and how to close its client
    (None without Redis). Each reader has its own client: one closing never cuts the other."""
    # a few seconds, not the worker's one: a tally is one pipeline of a hash per day
    client = redis_client(settings.redis_url, timeout_s=READ_TIMEOUT_S / 2)
    store = agreement_store(settings, client)  # the workers' keys: same topic prefix
    if client is None or store is None:
        return None
    return store, client.aclose


class AgreementReader(TallyReader[Tally]):
    """The agreement tally (verdicts joined to outcomes)."""

    what = "agreement tally"

    @classmethod
    def of_settings(cls, settings: Settings) -> AgreementReader:
        found = _workers_store(settings)
        # the agent page's threshold is learned from this tally: read at least as often as
        # the workers learn theirs, so the page shows a new one within their refresh interval
        every_s = min(REFRESH_S, settings.calibration_refresh_s)
        return cls(None) if found is None else cls(found[0].tally, every_s, close=found[1])


class ActionReader(TallyReader[ActionTally]):
    """The action tally: what came of the reflections (and other actions) asked."""

    what = "action tally"

    @classmethod
    def of_settings(cls, settings: Settings) -> ActionReader:
        found = _workers_store(settings)
        return cls(None) if found is None else cls(found[0].action_tally, close=found[1])


@dataclass(frozen=True)
class Column:
    """One verdict source's figures on a set of the agent's runs."""

    label: str
    view: str
    figures: Figures


@dataclass(frozen=True)
class Agreement:
    """What the agent page shows: the final verdicts' figures on every run with an outcome,
    then rules, judge and blend side by side on the runs the judge answered (when any), the
    outcome sources and the final verdicts' reliability plot."""

    columns: list[Column]
    sources: list[tuple[str, int]]  # outcome source, runs with an outcome from it
    plot: str

    @property
    def final(self) -> Figures:
        return self.columns[0].figures


def agreement_of(tally: Tally, agent: str) -> Agreement | None:
    """The agent's agreement, or None when none of its runs has an outcome yet."""
    final = tally.figures("final", agent=agent)
    if not final.runs:
        return None
    columns = [Column("final verdicts, all runs", "final", final)]
    judged = tally.figures("final", agent=agent, judged=True)
    if judged.runs:  # the same runs for each, so the comparison is fair
        for view, label in (("rules", "rules"), ("judge", "LLM judge"), ("blend", "blend")):
            figures = tally.figures(view, agent=agent, judged=True)
            columns.append(Column(f"{label}, judged runs", view, figures))
    for view in views_of(tally):  # a team's own dimension: its score against the outcomes
        figures = tally.figures(view, agent=agent)
        if figures.runs:
            name = view[len(DIMENSION_PREFIX) :]
            columns.append(Column(f"the team's {name}", view, figures))
    by_source: Counter[str] = Counter()
    for cell, n in tally.counts.items():
        if cell.agent == agent and cell.view == "rules" and n > 0:
            by_source[cell.source] += n
    return Agreement(columns, by_source.most_common(), reliability_plot(final))


def auc_text(f: Figures) -> str:
    """The AUC with its interval and what it was computed on."""
    if f.auc is None or f.auc_interval is None:
        return f"— (needs ok and failed runs: {f.ok_runs} ok, {f.failed_runs} failed)"
    low, high = f.auc_interval
    return f"{f.auc:.2f} [{low:.2f}–{high:.2f}] ({f.ok_runs} ok × {f.failed_runs} failed)"


def share_text(s: Share) -> str:
    """A share with its count and its 95 % interval: "6% (3 of 50) [2–16%]"."""
    interval = s.interval
    if s.value is None or interval is None:
        return "— (none to count)"
    return (
        f"{100 * s.value:.0f}% ({s.hits} of {s.count}) "
        f"[{100 * interval[0]:.0f}–{100 * interval[1]:.0f}%]"
    )


@dataclass(frozen=True)
class ActionColumn:
    """One figure of the action table: its heading, what it means, how a cell reads, and
    whether it is shown only when some action has it (the early stops' own figures)."""

    key: str
    heading: str
    title: str
    cell: Callable[[ActionFigures], str]
    optional: bool = False


def _share(n: int, of: int) -> str:
    return f"{n} ({100 * n / of:.0f}%)" if of else str(n)


def _mean(value: float | None, fmt: str) -> str:
    return "—" if value is None else fmt.format(value)


ACTION_COLUMNS = (
    ActionColumn(
        "asked", "asked", "reflection requests (or retries, stops) asked", lambda f: str(f.asked)
    ),
    ActionColumn(
        "followed_up",
        "followed up",
        "follow-ups judged within TRACEJUDGE_ACTION_FOLLOWUP_WINDOW_S (share of asked)",
        lambda f: _share(f.followed_up, f.asked),
    ),
    ActionColumn("late", "late", "follow-ups judged after the window", lambda f: str(f.late)),
    ActionColumn(
        "success", "success", "follow-ups whose steps succeeded", lambda f: str(f.success)
    ),
    ActionColumn(
        "complete", "complete", "follow-ups that finished the goal", lambda f: str(f.complete)
    ),
    ActionColumn(
        "fixed",
        "fixed",
        "follow-ups both success and complete (share of followed up)",
        lambda f: _share(f.fixed, f.followed_up),
    ),
    ActionColumn(
        "score_change",
        "score change",
        "mean of the follow-up's score minus its origin's",
        lambda f: _mean(f.mean_score_change, "{:+.1f}"),
    ),
    ActionColumn(
        "seconds",
        "time to follow-up",
        "mean time from the origin's verdict to the follow-up's",
        lambda f: _mean(f.mean_seconds, "{:.0f} s"),
    ),
    ActionColumn(
        "runs", "runs", "iterative runs never told they may stop", lambda f: str(f.runs), True
    ),
    ActionColumn(
        "rounds_saved",
        "rounds saved",
        "rounds not run by the loops that stopped when told",
        lambda f: str(f.rounds_saved),
        True,
    ),
    ActionColumn(
        "mean_score",
        "mean score",
        "early stops: of the loops that stopped; ran to end: of all",
        lambda f: _mean(f.mean_score, "{:.1f}"),
        True,
    ),
)


@dataclass(frozen=True)
class ActionTable:
    """The agent's action figures as the agent page shows them: a row per action kind."""

    columns: list[ActionColumn]
    rows: list[tuple[str, list[str]]]  # action kind, a cell per column


def _action_order(action: str) -> tuple[int, int, str]:
    """reflection_1, reflection_2 ... reflection_10 in their rounds' order, then the others."""
    kind, _, number = action.rpartition("_")
    if kind == "reflection" and number.isdigit():
        return (0, int(number), "")
    return (1, 0, action)


def actions_of(tally: ActionTally, agent: str) -> ActionTable | None:
    """The agent's action figures (as `tracejudge status` shows them), or None when nothing
    was asked of it and nothing counted."""
    mine = {action: f for (who, action), f in tally.figures().items() if who == agent}
    if not mine:
        return None
    columns = [
        c
        for c in ACTION_COLUMNS
        # an optional figure is shown when some action has it (early stops, loops run)
        if not c.optional or any(c.cell(f) not in ("0", "—") for f in mine.values())
    ]
    rows = [
        (action, [c.cell(mine[action]) for c in columns])
        for action in sorted(mine, key=_action_order)
    ]
    return ActionTable(columns, rows)


# the steers' table: figure, heading, what it means (each a share of the steers sent)
STEER_COLUMNS = (
    ("sent", "steered", "steers sent for the rule, in final evaluations"),
    ("left_loop", "left the loop", "the rule did not cross again in the run"),
    ("ended", "ended on its own", "the run ended on its final response, never stopped"),
    ("stopped", "stopped", "the rule crossed again and the run was stopped for it"),
    ("passed", "passed", "the run's final verdict passed"),
    ("success", "success", "the run's steps succeeded"),
    ("incomplete", "incomplete", "the run was judged incomplete"),
    ("outcome_ok", "outcome ok", "outcomes that were ok, of those that came (once per source)"),
)


@dataclass(frozen=True)
class SteerTable:
    """What came of the agent's steers, a row per loop rule (as `tracejudge status` says)."""

    columns: tuple[tuple[str, str, str], ...]
    rows: list[tuple[str, list[str]]]  # loop rule, a cell per column


def _steer_cell(key: str, f: SteerFigures) -> str:
    if key == "sent":
        return str(f.sent)
    if key == "outcome_ok":
        labelled = f.outcome_ok + f.outcome_failed
        return f"{f.outcome_ok} of {labelled}" if labelled else "—"
    n: int = getattr(f, key)
    return _share(n, f.sent)


def steers_of(tally: ActionTally, agent: str) -> SteerTable | None:
    """The agent's steer figures, or None when none of its loops was steered."""
    mine = {rule: f for (who, rule), f in tally.steer_figures().items() if who == agent}
    if not mine:
        return None
    rows = [
        (rule, [_steer_cell(k, f) for k, _, _ in STEER_COLUMNS]) for rule, f in sorted(mine.items())
    ]
    return SteerTable(STEER_COLUMNS, rows)
