"""The modes agent's handler: each final verdict's mode in, announcements out.

Records come from the mode-runs topic keyed by agent, so one agent's verdicts are counted in
order by one worker; its modes are records of the mode-state table (`store.py`), changed only
here, in stream iteration. A verdict delivered again (at-least-once) is counted
once where its mode still holds its request id. Announcements have deterministic ids: one
published again after a crash is the same record.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from tracejudge.judges.modes.watch import AgentModes, ModeTimes
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import decode_object
from tracejudge.models.modes import ModeAlert, ModeRun, ModeTick
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.modes.store import ModeStore
from tracejudge.streams.shared.metrics import Metrics
from tracejudge.streams.shared.outputs import Channel, deliver
from tracejudge.streams.shared.visible import visible_log

log = logging.getLogger(__name__)

MAX_RECORD_BYTES = 16_000  # a run is ids, a time and a mode of bounded words
SHOW_EVERY_S = 10.0  # how often an agent's /metrics series are set from its modes
# agents watched per worker: past it a new agent's verdicts are counted, not watched (a client
# naming every request a new agent cannot grow the table without bound)
MAX_AGENTS = 10_000


@dataclass
class ModeHandler:
    table: MutableMapping[str, bytes]
    modes: Channel
    times: ModeTimes
    metrics: Metrics
    # agents with a mode announced and not quiet yet: what the timer ticks
    loud: set[str] = field(default_factory=set)
    _shown_at: dict[str, float] = field(default_factory=dict)  # an agent's series last set
    # the assignment `loud` was read in for (see `reindex`); None: never
    indexed_for: int | None = None

    def __post_init__(self) -> None:
        self.store = ModeStore(self.table)

    async def __call__(self, record: InRecord) -> None:
        data = decode_object(record.value, MAX_RECORD_BYTES)
        try:
            if data.get("type") == "mode_run":
                await self.on_run(ModeRun.model_validate(data))
            elif data.get("type") == "mode_tick":
                await self.on_tick(ModeTick.model_validate(data))
            else:
                raise InvalidEvent("unknown_type", "not a mode run or tick")
        except ValidationError as exc:
            raise InvalidEvent("invalid", str(exc).splitlines()[0][:200]) from None

    def _save(self, agent: str, modes: AgentModes) -> None:
        self.store.save(agent, modes)
        if any(m.loud for m in modes.modes.values()):
            self.loud.add(agent)
        else:
            self.loud.discard(agent)

    async def on_run(self, run: ModeRun) -> None:
        agent = run.agent_name or ""
        modes = self.store.get(agent)
        if modes is None:
            if len(self.store.agents()) >= MAX_AGENTS:
                self.metrics.counts["mode_agents_over"] += 1
                return
            modes = AgentModes(agent_name=run.agent_name, since=run.at)
        if run.mode is not None:
            kept = modes.modes.get(run.mode.key)
            if kept is not None and any(r.request_id == run.request_id for r in kept.recent):
                self.metrics.counts["mode_runs_again"] += 1
                return  # delivered again: counted the first time
        minute = int(run.at // 60)
        said = modes.observe(run, self.times)
        self.metrics.counts["mode_runs"] += 1
        if run.mode is None and not modes.gone and self.store.saved_minute(agent) == minute:
            # a clean verdict adds one to the agent's count of the minute: written with its
            # next failure or the next minute's first verdict (a crash may lose a minute of
            # clean counts, never a failure), so most verdicts write nothing
            return
        quiet = modes.tick(run.at, self.times)  # the agent's clock moved: anything quiet?
        self._save(agent, modes)
        self._show(agent, modes, run.at)
        for alert in ([said] if said is not None else []) + quiet:
            await self._announce(alert)

    async def on_tick(self, tick: ModeTick) -> None:
        agent = tick.agent_name or ""
        modes = self.store.get(agent)
        if modes is None:
            self.loud.discard(agent)
            return
        quiet = modes.tick(tick.at, self.times)
        if not modes.modes and not modes.total:  # nothing of it left in the history: it goes
            self.store.drop(agent)
            self.loud.discard(agent)
        else:
            self._save(agent, modes)
        self._show(agent, modes, tick.at)
        for alert in quiet:
            await self._announce(alert)

    def due(self, now: float) -> list[str]:
        """The agents the timer ticks: those with a loud mode (quiet yet?), and those with no
        verdict for a whole history (their records go)."""
        idle = [
            agent
            for agent, modes in self.store.agents().items()
            if now - modes.last_at() > self.times.history_s
        ]
        return sorted(self.loud | set(idle))

    def reindex(self, assignment: int | None = None) -> int:
        """After a rebalance and the table's recovery: the agents with loud modes, from the
        table (another worker may have written them)."""
        self.indexed_for = assignment
        self.store.clear()
        self.loud = {
            agent
            for agent, modes in self.store.agents().items()
            if any(m.loud for m in modes.modes.values())
        }
        return len(self.loud)

    def _show(self, agent: str, modes: AgentModes, now: float) -> None:
        if now - self._shown_at.get(agent, float("-inf")) < SHOW_EVERY_S:
            return  # summing every mode's window is a tick's work, not every run's
        self._shown_at[agent] = now
        label = self.metrics.agents.agent_label(modes.agent_name)
        self.metrics.modes.show(label, modes.window_runs(now, self.times))

    async def _announce(self, alert: ModeAlert) -> None:
        key = (alert.agent_name or "").encode("utf-8")
        await deliver(self.modes, key, alert.model_dump_json().encode("utf-8"))
        self.metrics.counts[f"mode_alerts_{alert.kind}"] += 1
        label = self.metrics.agents.agent_label(alert.agent_name)
        self.metrics.modes.alerts.labels(label, alert.kind).inc()
        log.info("failure mode %s: %s", alert.kind, visible_log(alert.message))
