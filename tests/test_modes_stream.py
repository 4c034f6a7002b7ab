"""Failure modes through the worker's own handlers: runs closed by the event handler, their
modes sent by the publisher and counted by the modes agent's handler, as the worker wires them
(the channels collect what a topic would carry). One alert for a tool that starts failing, a
verdict delivered again counted once, the state kept across a restart in the table's records,
quiet after a window, bounded /metrics series, and records it cannot read dead-lettered."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tracejudge.models import names
from tracejudge.models.modes import ModeTick
from tracejudge.settings import Settings
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.kafka.status import Status, mode_lines, render_status
from tracejudge.streams.modes import handler as handler_module
from tracejudge.streams.modes.handler import ModeHandler
from tracejudge.streams.replay import report
from tracejudge.streams.replay.engine import (
    CollectingChannel,
    MemoryLookup,
    ReplayResult,
    _channels,
    _stop,
)
from tracejudge.streams.shared.metrics import TOP_MODES
from tracejudge.streams.worker.context import Tables, WorkerContext

AGENT = "shop-bot"


class Worker:
    def __init__(self, table: dict[str, Any] | None = None, **overrides: Any) -> None:
        self.now = 1_800_000_000.0
        given = {"redis_url": "", "modes_window_s": 60, "modes_learn_s": 0, **overrides}
        settings = Settings.model_validate(given)
        self.settings = settings
        self.channels = _channels()
        tables = Tables({}, {}, {}, modes=table if table is not None else {})
        self.ctx = WorkerContext.build(
            settings, self.channels, tables, None, lookup=MemoryLookup(),
            clock=lambda: self.now, exit=_stop,
        )  # fmt: skip
        self.ctx.partitions.observe({p: 0 for p in range(settings.partitions)}, {})
        self.offset = 0
        self.done = 0

    @property
    def handler(self) -> ModeHandler:
        assert self.ctx.modes is not None
        return self.ctx.modes

    @property
    def alerts(self) -> list[dict[str, Any]]:
        assert isinstance(self.channels.modes, CollectingChannel)
        return self.channels.modes.values()

    async def run(self, rid: str, fails: bool, tool: str = "refund_order") -> None:
        events: list[dict[str, Any]] = [
            {"type": "task_started", "goal": f"refund {rid}", "agent_name": AGENT,
             "agent_version": "v2"},
            {"type": "tool_call", "tool": "lookup_order", "args_summary": rid, "success": True,
             "result_preview": "found"},
            {"type": "tool_call", "tool": tool, "args_summary": rid, "success": not fails,
             "error": f"HTTP 503 Service Unavailable (trace {abs(hash(rid)):x})" if fails else "",
             "result_preview": "" if fails else "refunded"},
            {"type": "final_response",
             "output": "Sorry, I could not refund it." if fails else "Refunded."},
        ]  # fmt: skip
        topic = self.settings.topic(names.EVENTS)
        for n, event in enumerate(events):
            self.offset += 1
            value = json.dumps({**event, "request_id": rid, "step_index": n}).encode()
            await self.ctx.errors.run(InRecord(topic, 0, self.offset, rid.encode(), value, {}),
                                      self.ctx.events)  # fmt: skip
        await self.drain()

    async def drain(self, again: bool = False) -> None:
        """The mode runs the publisher sent, taken by the modes agent's handler; `again`: the
        last one delivered a second time (at-least-once)."""
        runs = self.channels.mode_runs
        assert isinstance(runs, CollectingChannel)
        topic = self.settings.topic(names.MODE_RUNS)
        if again:
            self.done -= 1
        while self.done < len(runs.sent):
            key, value = runs.sent[self.done]
            self.done += 1
            await self.ctx.errors.run(InRecord(topic, 0, self.done, key, value, {}), self.handler)

    async def tick(self) -> None:
        tick = ModeTick(agent_name=AGENT, at=self.now).model_dump_json().encode()
        topic = self.settings.topic(names.MODE_RUNS)
        await self.ctx.errors.run(InRecord(topic, 0, 0, AGENT.encode(), tick, {}), self.handler)


async def test_a_tool_that_starts_failing_is_one_alert_counted_once_kept_and_quiet_later() -> None:
    table: dict[str, Any] = {}
    worker = Worker(table)
    for n in range(3):
        await worker.run(f"ok-{n}", fails=False)
        worker.now += 5
    for n in range(4):
        await worker.run(f"bad-{n}", fails=True)
        worker.now += 5
    await worker.drain(again=True)  # the fourth delivered again: still four
    assert worker.ctx.counters["mode_runs_again"] == 1 and worker.alerts == []
    # a restart: another worker reads the agent's modes from the table's records
    assert json.dumps([AGENT]) in table and len(table) == 2  # the agent's counts, its mode
    worker = Worker(table)
    worker.now += 40
    await worker.run("bad-4", fails=True)
    (alert,) = worker.alerts
    assert (alert["kind"], alert["runs"], alert["agent_name"]) == ("new", 5, AGENT)
    assert alert["mode"]["name"] == (
        "refund_order fails with HTTP 503 Service Unavailable (trace <HEX>) after lookup_order"
    )
    assert alert["examples"] == [f"bad-{n}" for n in range(5)]
    for n in range(5, 9):  # it keeps failing: not announced again within the window
        await worker.run(f"bad-{n}", fails=True)
    assert len(worker.alerts) == 1
    text = worker.ctx.metrics.exposition().decode()
    assert 'tracejudge_mode_alerts_total{agent="shop-bot",kind="new"} 1.0' in text
    worker.now += 61
    await worker.tick()
    assert [a["kind"] for a in worker.alerts] == ["new", "quiet"]
    await worker.tick()
    assert len(worker.alerts) == 2  # quiet once


async def test_metrics_keep_an_agents_top_modes_and_count_the_rest_as_other() -> None:
    worker = Worker(modes_window_s=600)
    for n in range(12):
        await worker.run(f"r-{n}", fails=True, tool=f"tool_{n}")  # twelve modes
        worker.now += 11
    text = worker.ctx.metrics.exposition().decode()
    series = [line for line in text.splitlines() if line.startswith("tracejudge_mode_runs{")]
    assert len(series) == TOP_MODES + 1 and any('mode="(other)"' in s for s in series)


async def test_a_record_it_cannot_read_is_dead_lettered_and_the_next_counted() -> None:
    worker = Worker()
    topic = worker.settings.topic(names.MODE_RUNS)
    infinite = b'{"type": "mode_run", "request_id": "r", "at": Infinity}'
    for bad in (b"not json", b'{"type": "mode_run"}', b'{"type": "other"}', b"[1]", infinite):
        await worker.ctx.errors.run(InRecord(topic, 0, 0, b"x", bad, {}), worker.handler)
    assert worker.ctx.counters["dead_lettered"] == 5
    await worker.run("bad-0", fails=True)
    assert worker.ctx.counters["mode_runs"] == 1


def test_status_lists_the_latest_announcement_per_mode_and_shows_hostile_words_harmless() -> None:
    mode = {"key": "k1", "name": "pay fails \x1b[31mwith HTTP 503"}
    alerts: list[dict[str, Any]] = [
        {"kind": "new", "agent_name": "shop", "mode": mode, "runs": 5, "ts": 100.0},
        {"kind": "quiet", "agent_name": "shop", "mode": mode, "runs": 0, "ts": 900.0},
        {"kind": "jump", "agent_name": "coder", "mode": {"key": "k2", "name": "x"}, "ts": "?"},
    ]
    lines = mode_lines(alerts)
    assert lines[0].startswith("  coder: x  (jump at 00:00:00") and "(quiet at 00:15:00" in lines[1]
    text = render_status(Status(Settings(redis_url="").masked(), [], [], modes=alerts))
    assert "\x1b" not in text and "pay fails" in text
    assert mode_lines(None) == ["  the modes topic could not be read"]


async def test_an_agent_quiet_for_the_history_is_dropped_and_new_agents_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table: dict[str, Any] = {}
    worker = Worker(table, modes_history_s=600)
    await worker.run("bad-0", fails=True)
    assert len(table) == 2 and worker.handler.due(worker.now) == []
    worker.now += 700  # no verdict of it for a whole history
    assert worker.handler.due(worker.now) == [AGENT]
    await worker.tick()
    assert table == {} and worker.handler.store.agents() == {}
    monkeypatch.setattr(handler_module, "MAX_AGENTS", 1)
    await worker.run("bad-1", fails=True)  # the one agent watched
    topic = worker.settings.topic(names.MODE_RUNS)
    stranger = {"type": "mode_run", "agent_name": "another", "request_id": "r", "at": worker.now}
    value = json.dumps(stranger).encode()
    await worker.ctx.errors.run(InRecord(topic, 0, 0, b"another", value, {}), worker.handler)
    assert worker.ctx.counters["mode_agents_over"] == 1 and len(table) == 2


def test_replays_report_the_modes_a_config_change_adds_removes_or_resizes() -> None:
    def result(*modes: str | None) -> ReplayResult:
        evaluations: dict[str, dict[str, Any]] = {
            f"r{n}": {"request_id": f"r{n}", "agent_name": "shop", "overall_score": 50,
                      "passed": False, "success": False, "incomplete": True, "findings": [],
                      "mode": None if name is None else {"key": name, "name": name}}
            for n, name in enumerate(modes)
        }  # fmt: skip
        return ReplayResult(Settings(redis_url=""), 0, evaluations, [], [], [], 0)

    a = result("pay fails", "pay fails", "loops", None)
    b = result("pay fails", "loops", "loops", "asks twice")
    lines = report.comparison(a, b)
    at = lines.index("failure modes with another number of runs (0: added or removed):")
    moved = [" ".join(line.split()) for line in lines[at + 1 :]]
    assert moved == ["shop: asks twice 0 → 1", "shop: loops 1 → 2", "shop: pay fails 2 → 1"]
    assert "modes     3 failure modes over 4 runs; largest:" in report.mode_lines(b)
