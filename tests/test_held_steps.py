"""Steps held in memory while their input records stay unacknowledged (worker/windows.py): the
worker's real handlers, driven record by record through `CommitRule` as the window agent does."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.memory import Clock, MemoryChannel, fake_exit
from tests.test_worker_handlers import final, start, tool
from tracejudge.settings import Settings
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.replay.engine import MemoryLookup
from tracejudge.streams.worker.context import Channels, Tables, WorkerContext

RID = "req-1"


class Agent:
    """One worker: its context on shared tables, the records it acknowledged."""

    def __init__(self, tables: Tables, channels: Channels, hold_s: float = 10.0) -> None:
        self.clock = Clock()
        self.ctx = WorkerContext.build(
            Settings(redis_url=""),
            channels,
            tables,
            None,
            lookup=MemoryLookup(),
            clock=self.clock,
            exit=fake_exit,
            hold_s=hold_s,
        )
        self.ctx.partitions.observe({0: 0}, {})
        self.acked: list[int] = []

    async def handle(self, offset: int, value: dict[str, Any]) -> None:
        record = InRecord(
            "events", 0, offset, value["request_id"].encode(), json.dumps(value).encode(), {}
        )

        def ack() -> None:
            self.acked.append(offset)

        await self.ctx.commits.handle(record, self.ctx.events, ack)


def setup(hold_s: float = 10.0) -> tuple[Agent, Tables, Channels]:
    tables = Tables({}, {}, {})
    channels = Channels(*(MemoryChannel() for _ in range(8)))
    return Agent(tables, channels, hold_s), tables, channels


def evaluations(channels: Channels) -> list[Any]:
    channel = channels.evaluations
    assert isinstance(channel, MemoryChannel)
    return channel.values()


async def test_a_request_within_the_hold_writes_no_step_and_is_acked_with_its_verdict() -> None:
    agent, tables, channels = setup()
    events = [start(), tool(1), tool(2)]
    for offset, e in enumerate(events):
        await agent.handle(offset, e)
    await asyncio.sleep(0.01)
    assert agent.acked == []  # held: not acknowledged, nothing written
    assert tables.window_steps == {}
    await agent.handle(3, final())
    await agent.ctx.commits.drain()
    assert sorted(agent.acked) == [0, 1, 2, 3]
    assert [e["request_id"] for e in evaluations(channels)] == [RID]
    assert tables.window_steps == {}  # never written: the input topic held them


async def test_steps_held_too_long_are_written_and_their_records_acknowledged() -> None:
    agent, tables, _ = setup(hold_s=5.0)
    await agent.handle(0, start())
    await agent.handle(1, tool(1))
    agent.clock.now += 6
    await agent.handle(2, tool(2))  # the hold is over: everything held is written
    await agent.ctx.commits.drain()
    assert sorted(agent.acked) == [0, 1, 2] and len(tables.window_steps) == 3
    await agent.handle(3, tool(3))  # held again, until the idle scan's flush marker
    agent.clock.now += 6
    await agent.ctx.idle.scan()
    (marker,) = channels_events(agent).sent
    await agent.ctx.events(InRecord("events", 0, 4, marker.key, marker.value, dict(marker.headers)))
    await agent.ctx.commits.drain()
    assert sorted(agent.acked) == [0, 1, 2, 3] and len(tables.window_steps) == 4


def channels_events(agent: Agent) -> MemoryChannel:
    channel = agent.ctx.idle.events
    assert isinstance(channel, MemoryChannel)
    return channel


async def test_a_crash_before_the_verdict_was_acknowledged_judges_again_from_the_input() -> None:
    first, tables, channels = setup()
    events = [start(), tool(1, ok=False), tool(2), final()]
    for offset, e in enumerate(events[:3]):
        await first.handle(offset, e)
    channels.evaluations.fail_with = ConnectionError("broker gone")  # type: ignore[attr-defined]
    await first.handle(3, events[3])
    await asyncio.sleep(0.01)
    assert first.acked == [] and RID in tables.window_meta  # closed, nothing acknowledged
    # the worker died; the next one reads the same records again, on the same tables
    channels.evaluations.fail_with = None  # type: ignore[attr-defined]
    second = Agent(tables, channels)
    for offset, e in enumerate(events):
        await second.handle(offset, e)
    await second.ctx.commits.drain()
    assert sorted(second.acked) == [0, 1, 2, 3]
    (evaluation,) = evaluations(channels)
    # the same verdict as a worker that saw the window once, whole
    alone, _, alone_channels = setup(hold_s=0.0)
    for offset, e in enumerate(events):
        await alone.handle(offset, e)
    await alone.ctx.commits.drain()
    (expected,) = evaluations(alone_channels)
    assert {**evaluation, "ts": 0} == {**expected, "ts": 0}
    # a copy delivered after that is only late
    await second.handle(4, final())
    await second.ctx.commits.drain()
    assert len(evaluations(channels)) == 1


async def test_a_rebalance_drops_what_was_held_unacknowledged() -> None:
    agent, tables, _ = setup()
    await agent.handle(0, start())
    await agent.handle(1, tool(1))
    agent.ctx.store.unload()
    await agent.ctx.commits.drain()
    assert agent.acked == [] and tables.window_steps == {}


async def test_held_steps_do_not_count_against_the_outputs_in_flight() -> None:
    agent, _, channels = setup()
    agent.ctx.commits.limit = 2  # outputs in flight; held steps are bounded by the store
    rids = [f"r{i}" for i in range(6)]
    for offset, rid in enumerate(rids):
        await asyncio.wait_for(agent.handle(offset, start(rid)), 1)  # never blocks
    assert agent.acked == []
    for offset, rid in enumerate(rids, start=len(rids)):
        await asyncio.wait_for(agent.handle(offset, final(rid=rid)), 5)
    await agent.ctx.commits.drain()
    assert sorted(agent.acked) == list(range(12))
    assert len(evaluations(channels)) == 6


async def test_real_runs_judged_from_memory_get_the_verdicts_written_steps_get() -> None:
    """Held steps are judged from the events themselves, never encoded: the verdicts must be
    the ones made from the encoded records, byte for byte, on real runs (long texts, runs past
    the step limit, events without an event_id)."""
    path = Path(__file__).parent / "data" / "tau_airline" / "events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out = []
    for hold_s in (10.0, 0.0):
        agent, tables, channels = setup(hold_s)
        for offset, event in enumerate(events):
            await agent.handle(offset, event)
        await agent.ctx.commits.drain()
        if hold_s:
            assert tables.window_steps == {}  # every run judged from memory
        out.append([{**e, "ts": 0} for e in evaluations(channels)])
    held, written = out
    assert len(held) == 40 and held == written
