"""The libraries' private state: used in one module only, and checked at start-up."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tracejudge.streams.kafka import internals

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
    uses = {
        str(path.relative_to(ROOT)): found
        for folder in OURS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != here and (found := private_uses(path))
    }
    assert uses == {}
    assert private_uses(here)  # the scan does find them where they are


def test_the_worker_refuses_to_start_on_a_library_that_moved_its_internals(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import mode.worker

    from tracejudge.streams.settings import Settings
    from tracejudge.streams.worker.run import run_worker

    # as if a new mode release had renamed the method the worker overrides
    monkeypatch.delattr(mode.worker.Worker, "_schedule_shutdown")
    # a broker address nothing listens on: the check comes before any connection
    assert run_worker(Settings(kafka_bootstrap="127.0.0.1:9")) == 2
    assert "mode.worker:Worker._schedule_shutdown" in caplog.text
    assert "mode-streaming" in caplog.text


def test_offsets_acknowledged_twice_are_committed_in_one_run_not_one_per_commit() -> None:
    from collections import defaultdict
    from types import MethodType, SimpleNamespace

    from faust.transport.consumer import Consumer
    from intervaltree import IntervalTree

    def consumer() -> SimpleNamespace:
        # the state faust's own `_new_offset` reads, with offsets 28..59 acknowledged twice
        # (as after an acknowledgement that landed during a rebalance)
        state = SimpleNamespace(
            _acked=defaultdict(list),
            _acked_index=defaultdict(set),
            _gap=defaultdict(IntervalTree),
            _committed_offset=defaultdict(lambda: None),
        )
        state._new_offset = MethodType(Consumer._new_offset, state)
        state._acked["tp"] = sorted([*range(28, 60), *range(28, 60)])
        state._acked_index["tp"] = set(range(28, 60))
        state._committed_offset["tp"] = 28
        return state

    plain = consumer()
    assert plain._new_offset("tp") == 29  # faust alone: one offset per commit
    fixed = consumer()
    internals.unique_acks(fixed)
    internals.unique_acks(fixed)  # once per consumer
    assert fixed._new_offset("tp") == 60 and fixed._acked["tp"] == []
    fixed._committed_offset["tp"] = 60  # what faust's commit records
    fixed._acked["tp"].extend([60, 61])
    assert fixed._new_offset("tp") == 62
