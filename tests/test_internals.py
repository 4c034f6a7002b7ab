"""The libraries' private state: used in one module only, and checked at start-up."""

from __future__ import annotations

import ast
import asyncio
from collections import defaultdict
from pathlib import Path
from types import MethodType, SimpleNamespace
from typing import Any

import pytest
from faust.transport.consumer import Consumer
from faust.types import TP
from intervaltree import IntervalTree

from tracejudge.streams.kafka import internals, membership

ROOT = Path(__file__).resolve().parent.parent
PRIVATE = {r.attribute for r in internals.RELIANCES} | {
    "_fetch_max_wait_ms",
    "_tracejudge_wait_first",
}
OURS = ("streams", "client", "judges", "models", "prompts", "benchmarks")


def _method(reliance: internals.Reliance) -> bool:
    module, _, name = reliance.owner.partition(":")
    cls = getattr(__import__(module, fromlist=[name]), name)
    return callable(getattr(cls, reliance.attribute, None))


# private methods of theirs: a def of that name in our code overrides one
PRIVATE_METHODS = {r.attribute for r in internals.RELIANCES if _method(r)} - {"wait_first"}


def test_every_private_attribute_relied_on_is_there() -> None:
    assert list(internals.missing()) == []
    internals.check()


def test_a_missing_attribute_stops_the_start_with_the_versions_named() -> None:
    gone = internals.Reliance("aiokafka.consumer.fetcher:Fetcher", "_no_such_state", "a test")
    with pytest.raises(internals.InternalsChanged) as caught:
        internals.check((*internals.RELIANCES, gone))
    message = str(caught.value)
    assert "aiokafka.consumer.fetcher:Fetcher._no_such_state" in message
    assert f"aiokafka {internals.versions()['aiokafka']}" in message
    assert "faust-streaming" in message


def private_uses(path: Path) -> list[str]:
    """Accesses of the libraries' private attributes (not on `self` of our own classes),
    `getattr` with their names, and overrides of their private methods."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE | {"wait_first"}:
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id == "self"):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and name.value in PRIVATE:
                found.append(f"{path.name}:{node.lineno} getattr {name.value}")
        elif isinstance(node, ast.FunctionDef) and node.name in PRIVATE_METHODS:
            found.append(f"{path.name}:{node.lineno} def {node.name}")
    return found


def test_private_library_state_is_touched_in_the_internals_module_only() -> None:
    here = ROOT / "streams" / "kafka" / "internals.py"
    aiokafka_only = ROOT / "streams" / "kafka" / "membership.py"  # for the judge stage
    uses = {
        str(path.relative_to(ROOT)): found
        for folder in OURS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path not in (here, aiokafka_only) and (found := private_uses(path))
    }
    assert uses == {}
    assert private_uses(here) and private_uses(aiokafka_only)  # the scan does find them


def test_the_worker_refuses_to_start_on_a_library_that_moved_its_internals(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import mode.worker

    from tracejudge.settings import Settings
    from tracejudge.streams.worker.run import run_worker

    # as if a new mode release had renamed the method the worker overrides
    monkeypatch.delattr(mode.worker.Worker, "_schedule_shutdown")
    # a broker address nothing listens on: the check comes before any connection
    assert run_worker(Settings(kafka_bootstrap="127.0.0.1:9")) == 2
    assert "mode.worker:Worker._schedule_shutdown" in caplog.text
    assert "mode-streaming" in caplog.text


def faust_consumer(
    acked: dict[Any, list[int]], committed: dict[Any, int], unacked: list[Any] | None = None
) -> SimpleNamespace:
    """The state faust's own `Consumer._new_offset` and `perform_seek` read and write, with
    those two methods bound to it."""
    state = SimpleNamespace(
        _acked=defaultdict(list, {tp: list(offsets) for tp, offsets in acked.items()}),
        _acked_index=defaultdict(set, {tp: set(offsets) for tp, offsets in acked.items()}),
        _gap=defaultdict(IntervalTree),
        _committed_offset=defaultdict(lambda: None, committed),
        _read_offset=defaultdict(lambda: None),
        _unacked_messages=unacked or [],
    )
    state._new_offset = MethodType(Consumer._new_offset, state)
    state.perform_seek = MethodType(Consumer.perform_seek, state)
    return state


def test_offsets_acknowledged_twice_are_committed_in_one_run_not_one_per_commit() -> None:
    def consumer() -> SimpleNamespace:
        # offsets 28..59 acknowledged twice (an acknowledgement landed during a rebalance)
        return faust_consumer({"tp": sorted([*range(28, 60), *range(28, 60)])}, {"tp": 28})

    plain = consumer()
    assert plain._new_offset("tp") == 29  # faust alone: one offset per commit
    fixed = consumer()
    internals.checked_new_offset(fixed)
    internals.checked_new_offset(fixed)  # once per consumer
    assert fixed._new_offset("tp") == 60 and fixed._acked["tp"] == []
    fixed._committed_offset["tp"] = 60  # what faust's commit records
    fixed._acked["tp"].extend([60, 61])
    assert fixed._new_offset("tp") == 62


def test_a_record_still_being_handled_at_the_head_is_not_committed_over() -> None:
    held = SimpleNamespace(tp="tp", offset=449, acked=False)  # its step kept in memory
    other = SimpleNamespace(tp="other", offset=100, acked=False)

    def consumer() -> SimpleNamespace:
        # committed at 449; 450..460 acknowledged, 449 delivered and not acknowledged yet
        return faust_consumer({"tp": list(range(450, 461))}, {"tp": 449}, [held, other])

    assert consumer()._new_offset("tp") == 461  # faust alone: 449 passed over
    fixed = consumer()
    internals.checked_new_offset(fixed)
    assert fixed._new_offset("tp") is None
    held.acked = True  # its verdict acknowledged
    fixed._acked["tp"].append(449)
    assert fixed._new_offset("tp") == 461
    fixed._committed_offset["tp"] = 461  # what faust's commit records
    fixed._acked["tp"].extend([462, 463])  # 461: a transaction marker, no record delivered
    assert fixed._new_offset("tp") == 464

    # nothing committed yet: faust commits from the first acknowledged offset, whatever is below
    early = SimpleNamespace(tp="tp", offset=3, acked=False)
    assert faust_consumer({"tp": [5, 6]}, {}, [early])._new_offset("tp") == 7
    fresh = faust_consumer({"tp": [5, 6]}, {}, [early])
    internals.checked_new_offset(fresh)
    assert fresh._new_offset("tp") is None


async def test_a_rebalance_seek_ending_after_a_commit_does_not_put_the_commit_back() -> None:
    tp, other, new = TP("events", 0), TP("events", 1), TP("events", 2)

    def consumer() -> SimpleNamespace:
        # records 449..460 were committed (461) while faust's seek was still reading the
        # group's offsets, which it found at 449; 461..470 are acknowledged since
        state = faust_consumer({}, {})

        async def seek_to_committed() -> dict[TP, int]:
            state._committed_offset.update({tp: 461})  # faust's commit, meanwhile
            return {tp: 449, other: 0}

        state.seek_to_committed = seek_to_committed
        return state

    plain = consumer()
    await plain.perform_seek()
    plain._acked[tp].extend(range(461, 471))
    assert plain._committed_offset[tp] == 449
    assert plain._new_offset(tp) is None  # faust alone: never committed again

    fixed = consumer()
    internals.commits_never_back(fixed)
    internals.commits_never_back(fixed)  # once per consumer
    await fixed.perform_seek()
    fixed._acked[tp].extend(range(461, 471))
    assert fixed._committed_offset[tp] == 461
    assert fixed._committed_offset[other] is None and fixed._committed_offset[new] is None
    assert fixed._new_offset(tp) == 471
    fixed._committed_offset.pop(tp)  # revoked: the next assignment starts from the group's
    fixed._committed_offset.update({tp: 300})
    assert fixed._committed_offset[tp] == 300


async def test_a_commit_refused_after_the_group_moved_on_keeps_the_membership() -> None:
    from aiokafka import TopicPartition
    from aiokafka.consumer.group_coordinator import GroupCoordinator
    from aiokafka.errors import IllegalGenerationError
    from aiokafka.structs import OffsetAndMetadata

    tp = TopicPartition("events", 0)

    def coordinator(moves_on: bool) -> GroupCoordinator:
        # aiokafka's own commit and its handling of the answer; only the request is answered
        # here: IllegalGeneration, after (or without) the next generation forming meanwhile
        state: GroupCoordinator = GroupCoordinator.__new__(GroupCoordinator)
        state.group_id, state.coordinator_id = "group", 1
        state.generation, state.member_id = 1, "member-a"
        state._rejoin_needed_fut = asyncio.get_running_loop().create_future()

        async def send_req(request: object) -> object:
            if moves_on:  # the member joined generation 2 while the commit was in flight
                state.generation = 2
            code = IllegalGenerationError.errno
            return SimpleNamespace(topics=[(tp.topic, [(tp.partition, code)])])

        state._send_req = send_req  # type: ignore[method-assign]
        return state

    async def commit(state: GroupCoordinator) -> None:
        with pytest.raises(IllegalGenerationError):  # the commit fails either way
            await state._do_commit_offsets(None, {tp: OffsetAndMetadata(10, "")})

    plain = coordinator(moves_on=True)
    await commit(plain)
    assert (plain.generation, plain.member_id) == (-1, "")  # aiokafka: a ghost member left

    def consumer(state: GroupCoordinator) -> SimpleNamespace:
        return SimpleNamespace(
            _thread=SimpleNamespace(_consumer=SimpleNamespace(_coordinator=state))
        )

    fixed = coordinator(moves_on=True)
    membership.stale_commits_keep_membership(consumer(fixed))
    membership.stale_commits_keep_membership(consumer(fixed))  # once per consumer
    await commit(fixed)
    assert (fixed.generation, fixed.member_id) == (2, "member-a")
    assert not fixed._rejoin_needed_fut.done()

    judge = coordinator(moves_on=True)  # an AIOKafkaConsumer of our own (the judge stage's)
    membership.stale_commits_keep_membership(SimpleNamespace(_coordinator=judge))
    await commit(judge)
    assert (judge.generation, judge.member_id) == (2, "member-a")

    same = coordinator(moves_on=False)  # refused in the generation it was sent in: reset
    membership.stale_commits_keep_membership(consumer(same))
    await commit(same)
    assert (same.generation, same.member_id) == (-1, "")
    assert same._rejoin_needed_fut.done()
