from __future__ import annotations

import json
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest

from tracejudge.judges.windows.records import WindowMeta, read_step, step_record
from tracejudge.models.events import ToolCall, parse_event
from tracejudge.streams.worker.idle import due, marker_applies
from tracejudge.streams.worker.windows import WindowStore


class ChangelogDict(MutableMapping[str, Any]):
    """A dict that counts the bytes a Faust changelog would carry for each write."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.bytes_written = 0
        self.log: list[tuple[str, Any]] = []  # every write in order; None is a tombstone

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        size = len(value) if isinstance(value, bytes) else len(json.dumps(value))
        self.bytes_written += len(key) + size
        self.log.append((key, value))
        self.data[key] = value

    def __delitem__(self, key: str) -> None:
        self.bytes_written += len(key)
        self.log.append((key, None))
        del self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def store(max_steps: int = 50, capture: bool = True, tail_steps: int = 10) -> WindowStore:
    return WindowStore(
        ChangelogDict(),
        ChangelogDict(),
        max_steps=max_steps,
        capture=capture,
        tail_steps=tail_steps,
    )


def again(s: WindowStore) -> WindowStore:
    """A worker that starts on what `s` left in its tables (nothing in memory)."""
    return WindowStore(s.meta, s.steps, max_steps=s.max_steps, capture=s.capture)


def tool(rid: str, i: int, ok: bool = True) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "request_id": rid,
        "step_index": i,
        "tool": f"t{i % 3}",
        "success": ok,
        "args_summary": "x" * 300,
        "result_preview": "y" * 300,
    }


def final(rid: str) -> dict[str, Any]:
    return {"type": "final_response", "request_id": rid, "output": "done, all booked"}


def changelog(s: WindowStore) -> list[tuple[str, Any]]:
    return [*s.meta.log, *s.steps.log]  # type: ignore[attr-defined]


def run_window(steps: int) -> tuple[int, WindowStore]:
    s = store(max_steps=10_000)
    events = [tool("r", i) for i in range(steps)] + [final("r")]
    for offset, e in enumerate(events):
        s.add(parse_event(e), 0, 1.0, offset)
    s.collect("r", "final_response")
    count, _ = s.close("r", "final_response", 2.0, len(events) - 1)
    s.forget_steps("r", count)
    return sum(len(json.dumps(e)) for e in events), s


def test_changelog_bytes_grow_linearly_with_the_trace() -> None:
    small_in, small = run_window(20)
    large_in, large = run_window(400)
    small_out = sum(t.bytes_written for t in (small.meta, small.steps))  # type: ignore[attr-defined]
    large_out = sum(t.bytes_written for t in (large.meta, large.steps))  # type: ignore[attr-defined]
    # same bytes-per-input-byte ratio at 20x the length: linear, not quadratic
    assert large_out / large_in < 1.1 * (small_out / small_in)
    assert large_out < 2 * large_in


def test_one_changelog_record_per_event_and_one_per_close_and_no_tombstones() -> None:
    _, s = run_window(9)  # 10 events
    log = changelog(s)
    assert len(log) == 11
    assert all(value is not None for _, value in log)  # nothing deleted through the changelog
    assert not s.steps  # ... but the closed window's steps are gone from the local store
    assert s.meta["r"]["closed_by"] == "final_response"
    s.purge("r")
    assert not s.meta and len(changelog(s)) == 11


def replay(log: list[tuple[str, Any]]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for key, value in log:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


def test_redelivered_events_rewrite_what_a_crash_kept_only_on_disk() -> None:
    # A persistent store holds every write at once; the changelog only what was sent before
    # the worker was killed. The uncommitted events come again: after them, the changelog
    # must rebuild exactly the local state (what another worker would start from).
    s = store()
    events = [parse_event(tool("r", i)) for i in range(3)]
    for e in events:
        s.add(e, 0, 1.0)
    s.steps.log[:] = s.steps.log[:1]  # type: ignore[attr-defined]
    assert replay(s.steps.log) != dict(s.steps)  # type: ignore[attr-defined]
    restarted = again(s)
    for e in events[1:]:
        assert restarted.add(e, 0, 2.0) == "duplicate"
    assert replay(s.steps.log) == dict(s.steps)  # type: ignore[attr-defined]


def test_duplicates_late_events_and_order() -> None:
    s = store()
    assert s.add(parse_event(tool("r", 2)), 1, 1.0, 0) == "added"
    assert s.add(parse_event(tool("r", 2)), 1, 1.0, 1) == "duplicate"
    assert s.add(parse_event(tool("r", 0, ok=False)), 1, 1.5, 2) == "added"
    window = s.collect("r", "final_response")
    assert [c.step_index for c in window.tool_calls] == [0, 2]
    count, _ = s.close("r", "final_response", 2.0, 3)
    assert s.steps  # kept until the verdict is acknowledged
    s.forget_steps("r", count)
    assert not s.steps  # details forgotten
    assert s.add(parse_event(tool("r", 3)), 1, 3.0, 4) == "late"
    assert s.meta["r"]["late_events"] == 1 and not s.is_open("r")


def test_the_closing_record_delivered_again_before_the_ack_closes_again() -> None:
    s = store()
    for offset, e in enumerate([tool("r", 0), tool("r", 1), final("r")]):
        s.add(parse_event(e), 0, 1.0, offset)
    count, _ = s.close("r", "final_response", 2.0, 2)
    # the worker died before the verdict was acknowledged: the records come again
    restarted = again(s)
    assert restarted.add(parse_event(tool("r", 1)), 0, 3.0, 1) == "duplicate"
    assert restarted.add(parse_event(final("r")), 0, 3.0, 2) == "reclose"
    window = restarted.collect("r", "final_response")
    assert len(window.tool_calls) == 2 and window.final is not None
    assert restarted.close("r", "final_response", 3.0, 2)[0] == count
    restarted.forget_steps("r", count)
    # acknowledged now: the same record once more is only late
    assert again(s).add(parse_event(final("r")), 0, 4.0, 2) == "late"


def test_a_window_is_rebuilt_from_its_records_alone() -> None:
    s = store(max_steps=2)
    for i in range(4):
        s.add(parse_event(tool("r", i)), 3, 1.0)
    s.record_early("r", "hint", 2)
    restarted = again(s)
    assert restarted.add(parse_event(tool("r", 1)), 3, 2.0) == "duplicate"
    assert restarted.add(parse_event(tool("r", 9)), 3, 2.0) == "added"
    window = restarted.collect("r", "final_response")
    assert (window.step_count, window.steps_dropped) == (5, 3)
    assert restarted.early_actions("r") == {"hint"}
    assert restarted.open["r"].meta.partition == 3


def test_steps_beyond_limit_become_stubs_that_keep_tool_outcomes() -> None:
    s = store(max_steps=2, tail_steps=0)
    for i in range(5):
        s.add(parse_event(tool("r", i, ok=i != 4)), 0, 1.0)
    window = s.collect("r", "final_response")
    assert window.step_count == 5 and window.steps_dropped == 3
    assert [c.success for c in window.tool_calls] == [True, True, True, True, False]
    assert window.tool_calls[2].args_summary is None  # details dropped


def test_idle_purge_and_refresh_markers_are_due_and_rechecked() -> None:
    s = store()
    times = (300.0, 3600.0, 7200.0)
    s.add(parse_event(tool("a", 0)), 2, 100.0)
    assert list(due(s, 100.0 + 299, 300, 3600)) == []
    assert list(due(s, 100.0 + 300, 300, 3600)) == [("a", 2, "idle_close")]
    assert marker_applies(s, "a", "idle_close", 400.0, times)
    s.add(parse_event(tool("a", 1)), 2, 399.0)  # activity after the marker was sent
    assert not marker_applies(s, "a", "idle_close", 400.0, times)
    # busy for longer than the refresh age: its records are written again
    opened = s.open["a"].opened_at
    assert list(due(s, opened + 7200, 1e9, 3600, refresh_after_s=7200)) == [("a", 2, "refresh")]
    assert marker_applies(s, "a", "refresh", opened + 7200, times)
    before = len(s.steps.log)  # type: ignore[attr-defined]
    assert s.refresh("a", opened + 7200) == 2 and len(s.steps.log) == before + 2  # type: ignore[attr-defined]
    assert again(s).add(parse_event(tool("a", 2)), 2, 1.0) == "added"
    assert json.loads(again(s)._records("a")[0])["opened_at"] == opened + 7200
    s.close("a", "idle_timeout", 500.0, 7)
    assert list(due(s, 500.0 + 3600, 300, 3600)) == [("a", 2, "purge")]
    s.purge("a")
    assert "a" not in s.meta and not s.steps


def test_a_stored_step_reads_back_as_the_event_it_was_without_validating_again() -> None:
    final = parse_event(
        {
            "type": "final_response",
            "request_id": "r",
            "output": "z" * 9000,  # clipped on arrival, flagged
            "validation": {"verdict": "warn", "reasons": ["one"]},
        }
    )
    for event in (parse_event(tool("r", 1)), final):
        record = step_record(event, beyond_limit=False)
        earlier = json.loads(record)  # as an earlier version's changelog holds it
        for back in (read_step(record), read_step(earlier)):
            assert back == event.model_copy(update={"event_id": event.resolved_event_id()})
            assert type(back) is type(event) and back is not None
            assert back.clipped == event.clipped
    assert read_step(step_record(final, beyond_limit=True)) is None  # nothing to judge
    stub = read_step(step_record(parse_event(tool("r", 2, ok=False)), beyond_limit=True))
    assert isinstance(stub, ToolCall) and stub.success is False and stub.args_summary is None


def test_meta_records_of_earlier_versions_are_read() -> None:
    legacy = {"p": 3, "n": 2, "steps": 2, "dropped": 0, "first": 1.0, "late": 1, "last": 9.0}
    meta = WindowMeta.of_record(legacy)
    assert (meta.partition, meta.next_seq, meta.step_count, meta.late_events) == (3, 2, 2, 1)
    assert meta.last_event_at == 9.0 and not meta.closed
    closed = WindowMeta.of_record({**legacy, "closed": "idle_timeout", "closed_at": 10.0})
    assert closed.closed and closed.closed_by == "idle_timeout"
    assert WindowMeta.of_record(meta.to_record()) == meta


def test_iterations_are_kept_as_rounds_and_rebuilt_with_the_window() -> None:
    s = store()
    for i in (1, 2):
        event = {
            "type": "iteration",
            "request_id": "r",
            "step_index": i,
            "iteration": i,
            "max_iterations": 5,
            "response": f"try {i}",
            "exec_success": True,
        }
        s.add(parse_event(event), 0, 1.0)
    s.add(parse_event(tool("r", 3)), 0, 1.0)
    rounds = s.rounds("r")
    assert [(r.iteration, r.answered, r.exec_success) for r in rounds] == [
        (1, True, True),
        (2, True, True),
    ]
    assert again(s).add(parse_event(tool("r", 4)), 0, 2.0) == "added"
    assert [r.iteration for r in again(s).rounds("r")] == []  # not loaded until touched
    restarted = again(s)
    restarted.add(parse_event(tool("r", 5)), 0, 2.0)
    assert restarted.rounds("r") == rounds


@pytest.mark.parametrize("capture", [True, False])
def test_rounds_beyond_the_step_limit_are_kept_as_signals_and_rebuilt(capture: bool) -> None:
    s = store(max_steps=2, capture=capture)
    for i in range(1, 4):
        s.add(parse_event(tool("r", i)), 0, 1.0)
    s.add(
        parse_event(
            {
                "type": "iteration",
                "request_id": "r",
                "step_index": 4,
                "iteration": 2,
                "max_iterations": 5,
                "response": "<Conclusion>mail me at ann@example.com</Conclusion>",
            }
        ),
        0,
        1.0,
    )
    (round_,) = s.rounds("r")
    assert round_.iteration == 2 and round_.conclusion is not None
    restarted = again(s)
    restarted.add(parse_event(tool("r", 5)), 0, 2.0)
    (rebuilt,) = restarted.rounds("r")
    assert rebuilt.iteration == 2 and rebuilt.max_iterations == 5
    assert rebuilt.conclusion is not None and "ann@example.com" not in rebuilt.conclusion
    window = restarted.collect("r", "idle_timeout")
    assert [r.iteration for r in window.iterations] == [2]  # the iterations used survive
