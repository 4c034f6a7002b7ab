"""One state per request in flight: made from the window's records, dropped with the window,
bounded like it, and read alike by the per-step checks and the closed run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.memory import memory_worker
from tests.test_checks import refund_run
from tests.test_rules import window_of
from tracejudge.judges.checks.book import CheckBook
from tracejudge.judges.checks.view import run_of
from tracejudge.judges.windows.records import window_of as stored_window
from tracejudge.judges.windows.run_state import EVERY_STEP, GROWTH
from tracejudge.streams.worker.context import Tables


def confirm_run(rid: str = "r1") -> list[dict[str, Any]]:
    """Asks, is asked to confirm, says yes (step 4), then the guarded call (step 5)."""
    return [
        {"type": "task_started", "request_id": rid, "goal": "cancel my booking",
         "agent_name": "airline"},
        {"type": "user_message", "request_id": rid, "step_index": 1,
         "text": "please cancel booking ABC"},
        {"type": "tool_call", "request_id": rid, "step_index": 2, "tool": "get_booking",
         "args_summary": '{"id": "ABC"}', "success": True, "result_preview": "ABC, 2 seats"},
        {"type": "reasoning_step", "request_id": rid, "step_index": 3, "phase": "plan",
         "intent_summary": "ask the user to confirm the cancellation"},
        {"type": "user_message", "request_id": rid, "step_index": 4, "text": "yes, go ahead"},
        {"type": "tool_call", "request_id": rid, "step_index": 5, "tool": "cancel_booking",
         "args_summary": '{"id": "ABC"}', "success": True},
        {"type": "final_response", "request_id": rid, "output": "Cancelled booking ABC."},
    ]  # fmt: skip


def checks_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "checks.toml"
    path.write_text(text)
    return str(path)


async def test_a_partition_moved_and_moved_back_never_sends_a_stop_the_run_did_not_earn(
    tmp_path: Path,
) -> None:
    """Worker A reads the run up to the agent's question, the partition moves to B, which reads
    the user's yes, and moves back: A must read the yes (it is in the window's records) before
    it judges the guarded call. A state kept from before the move missed it and sent a stop."""
    path = checks_file(tmp_path, '[default]\nneeds_confirmation = ["cancel_booking"]\n')
    tables = Tables({}, {}, {})
    a = memory_worker(tables=tables, checks_file=path)
    b = memory_worker(tables=tables, checks_file=path)
    events = confirm_run()
    for event in events[:4]:
        await a.event(event)
    a.ctx.store.unload()  # revoked from A
    await b.event(events[4])  # the yes, read by B
    b.ctx.store.unload()  # revoked from B, assigned to A again
    for event in events[5:]:
        await a.event(event)
    assert a.channel("control").values() == [] and b.channel("control").values() == []
    (evaluation,) = a.channel("evaluations").values()
    assert not any(f["rule"].startswith("check:") for f in evaluation["findings"])


async def test_the_guarded_call_without_a_yes_is_still_stopped_after_a_move(
    tmp_path: Path,
) -> None:
    """The same move with a user who never said yes: the stop is sent, once, by the owner."""
    path = checks_file(tmp_path, '[default]\nneeds_confirmation = ["cancel_booking"]\n')
    tables = Tables({}, {}, {})
    a = memory_worker(tables=tables, checks_file=path)
    b = memory_worker(tables=tables, checks_file=path)
    events = confirm_run()
    events[4] = {**events[4], "text": "how much would I get back?"}
    for event in events[:4]:
        await a.event(event)
    a.ctx.store.unload()
    await b.event(events[4])
    b.ctx.store.unload()
    await a.event(events[5])
    (stop,) = a.channel("control").values()
    assert (stop["kind"], stop["crossed"], stop["step_index"]) == (
        "check",
        "needs_confirmation",
        5,
    )
    b.ctx.store.unload()
    a.ctx.store.unload()
    await b.event(events[6])  # closed by B after another move: no second stop
    assert b.channel("control").values() == []


async def test_the_agent_is_the_tasks_whatever_arrives_first(tmp_path: Path) -> None:
    """OpenTelemetry order: a nested agent's steps arrive before the root's task. Checks and
    the evaluation follow the task's agent, from the moment the task arrives."""
    path = checks_file(
        tmp_path,
        '[agents."planner"]\nnever_call = ["drop_table"]\n'
        '[agents."sub-searcher"]\nmax_calls = {search = 0}\n',
    )
    w = memory_worker(checks_file=path)
    rid = "otel-1"

    def call(step: int, tool: str) -> dict[str, Any]:
        return {"type": "tool_call", "request_id": rid, "step_index": step, "tool": tool,
                "success": True, "agent_name": "sub-searcher"}  # fmt: skip

    await w.event(call(1, "search"))
    await w.event(
        {"type": "task_started", "request_id": rid, "goal": "plan", "agent_name": "planner"}
    )
    await w.event(call(2, "drop_table"))
    # the sub-agent's check fired on the first step, before the task named the run's agent;
    # from the task on, the planner's checks apply
    told = w.channel("control").values()
    assert [(t["crossed"], t["agent_name"], t["step_index"]) for t in told] == [
        ("max_calls", "sub-searcher", 1),
        ("never_call", "planner", 2),
    ]
    await w.event({"type": "final_response", "request_id": rid, "output": "done"})
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["agent_name"] == "planner"


async def test_a_per_step_check_sees_what_the_closed_runs_check_sees(tmp_path: Path) -> None:
    """A long run (past the step limit) with a forbidden call at step 300 of 400: the check in
    flight stops on step 300, and the closed run's check finds the same step, which the
    window keeps (as a stub)."""
    path = checks_file(tmp_path, '[default]\nnever_call = ["rm_rf"]\non_step = "steer"\n')
    w = memory_worker(checks_file=path, max_trace_steps=50)
    rid = "long-1"
    await w.event({"type": "task_started", "request_id": rid, "goal": "tidy up"})
    for i in range(1, 401):
        await w.event(
            {"type": "tool_call", "request_id": rid, "step_index": i,
             "tool": "rm_rf" if i == 300 else "ls", "args_summary": f'{{"dir": {i}}}',
             "success": True, "result_preview": f"listing {i}"}
        )  # fmt: skip
    (told,) = w.channel("control").values()
    assert (told["crossed"], told["step_index"]) == ("never_call", 300)
    await w.event({"type": "final_response", "request_id": rid, "output": "tidied"})
    (evaluation,) = w.channel("evaluations").values()
    (finding,) = [f for f in evaluation["findings"] if f["rule"] == "check:never_call"]
    assert finding["step"] == 300


async def test_the_view_in_flight_is_the_view_of_the_window_it_would_close_as(
    tmp_path: Path,
) -> None:
    """At every step of a run past the step limit, the view the per-step checks read is the
    view a check reads of the window as stored at that moment (details, stubs, the tail)."""
    path = checks_file(tmp_path, '[default]\nnever_call = ["never"]\n')
    w = memory_worker(checks_file=path, max_trace_steps=5)
    rid = "v1"
    store = w.ctx.store
    events: list[dict[str, Any]] = [{"type": "task_started", "request_id": rid, "goal": "g"}]
    for i in range(1, 31):
        if i % 3 == 0:
            events.append(
                {"type": "user_message", "request_id": rid, "step_index": i, "text": f"u{i}"}
            )
        else:
            events.append(
                {"type": "tool_call", "request_id": rid, "step_index": i, "tool": f"t{i % 4}",
                 "args_summary": f"a{i}", "success": i % 5 != 0, "error": "boom" if i % 5 == 0
                 else None, "result_preview": f"r{i}"}
            )  # fmt: skip

    for event in events:
        await w.event(event)
        window = store.open[rid]
        assert window.run is not None and window.run.view is not None
        meta, records = store.stored(rid)
        stored = run_of(
            stored_window(
                rid, records, closed_by="idle_timeout", step_count=meta.step_count,
                steps_dropped=meta.steps_dropped, early_stops=[],
            )
        )  # fmt: skip
        assert window.run.view.steps == list(stored.steps), event


async def test_per_step_code_checks_run_in_time_linear_in_the_run(tmp_path: Path) -> None:
    """A per-step code check runs on every step while the run is short, then each time it has
    grown by a sixteenth: on 2,000 steps a few hundred runs of the check, not 2,000."""
    w = memory_worker(checks="tests.team_checks:counts_its_calls", max_trace_steps=50)
    rid = "many"
    await w.event({"type": "task_started", "request_id": rid, "goal": "g"})
    for i in range(1, 2001):
        await w.event(
            {"type": "tool_call", "request_id": rid, "step_index": i, "tool": "ls",
             "args_summary": str(i), "success": True, "result_preview": str(i)}
        )  # fmt: skip
    runs = w.ctx.metrics.registry.get_sample_value(
        "tracejudge_check_failures_total",
        {"check": "tests.team_checks:counts_its_calls", "severity": "note"},
    )
    # EVERY_STEP runs, then about GROWTH * ln(2000 / EVERY_STEP) more
    assert runs is not None and EVERY_STEP <= runs <= EVERY_STEP + GROWTH * 4 + 2, runs
    assert w.channel("control").values() == []  # a note is never sent


def test_the_closed_runs_checks_and_the_steppers_agree_on_every_cut(tmp_path: Path) -> None:
    """A stepper fed a run step by step finds what the whole-run check finds on each prefix."""
    text = (
        '[default]\nneeds_confirmation = ["refund"]\nmax_calls = {get_order = 1}\n'
        'call_before = [["get_order", "refund"]]\nnever_call = ["wipe"]\n'
    )
    book = CheckBook.read("", checks_file(tmp_path, text), entry_points_on=False)
    events = refund_run("20.00", confirmed=False)
    events.insert(3, {**events[1], "step_index": 2})  # get_order twice
    whole = run_of(window_of(events))
    for check in book.for_agent("support-bot"):
        assert check.stepper is not None
        for cut in range(len(whole.steps) + 1):
            prefix = whole.__class__(**{**whole.__dict__, "steps": whole.steps[:cut]})
            expected = check.failures(prefix)
            step = check.stepper(prefix.goal)
            got = next((f for s in prefix.steps if (f := step(s)) is not None), None)
            assert (got is None) == (not expected) and (got is None or got == expected[0])


async def test_a_new_agents_runaway_loop_is_stopped_past_the_default_ceiling() -> None:
    """No normal learned yet: steered twice as before, then, once past the ceiling (here 40
    calls) and still looping, stopped, the intervention saying by which measure."""
    w = memory_worker(loop_ceiling_calls=40)
    rid = "runaway"
    await w.event({"type": "task_started", "request_id": rid, "goal": "g", "agent_name": "new"})
    for i in range(1, 121):
        await w.event(
            {"type": "tool_call", "request_id": rid, "step_index": i, "tool": "status",
             "args_summary": "{}", "success": True, "result_preview": "pending"}
        )  # fmt: skip
    told = w.channel("control").values()
    assert [t["action"] for t in told] == ["steer", "steer", "stop"]
    stop = told[-1]
    assert stop["step_index"] > 40 and "default ceiling of 40 tool calls" in stop["normal"]


async def test_without_a_ceiling_a_new_agent_is_only_steered() -> None:
    w = memory_worker(loop_ceiling_calls=0)
    rid = "steered"
    for i in range(1, 121):
        await w.event(
            {"type": "tool_call", "request_id": rid, "step_index": i, "tool": "status",
             "args_summary": "{}", "success": True, "result_preview": "pending"}
        )  # fmt: skip
    assert [t["action"] for t in w.channel("control").values()] == ["steer", "steer"]


async def test_events_past_the_cap_are_counted_not_read_and_the_request_still_closes() -> None:
    w = memory_worker(max_events_per_request=100)
    rid = "capped"
    await w.event({"type": "task_started", "request_id": rid, "goal": "g"})
    for i in range(1, 151):
        await w.event(
            {"type": "tool_call", "request_id": rid, "step_index": i, "tool": "ls",
             "args_summary": str(i), "success": True, "result_preview": str(i)}
        )  # fmt: skip
    await w.event({"type": "final_response", "request_id": rid, "output": "listed"})
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["events_over_cap"] == 51  # the task and 99 calls were read
    assert evaluation["step_count"] == 99
    assert any("51 events past the cap" in r for r in evaluation["reasons"])
    over = w.ctx.metrics.registry.get_sample_value(
        "tracejudge_events_total", {"type": "tool_call", "status": "over_cap"}
    )
    assert over == 51


async def test_a_budget_is_counted_again_exactly_after_the_partition_moves(
    tmp_path: Path,
) -> None:
    """Worker A reads six steps of a run with a ten-step budget, then the partition moves: B
    counts A's six from the window's records, and stops the run on its eleventh step."""
    budgets = tmp_path / "budgets.toml"
    budgets.write_text("[default]\nsteps = 10\n")
    tables = Tables({}, {}, {})
    a = memory_worker(tables=tables, budgets_file=str(budgets))
    b = memory_worker(tables=tables, budgets_file=str(budgets))
    rid = "budget-moved"

    def call(i: int) -> dict[str, Any]:
        return {"type": "tool_call", "request_id": rid, "step_index": i, "tool": f"t{i}",
                "args_summary": str(i), "success": True, "result_preview": f"r{i}"}  # fmt: skip

    await a.event({"type": "task_started", "request_id": rid, "goal": "g"})
    for i in range(1, 7):
        await a.event(call(i))
    a.ctx.store.unload()
    for i in range(7, 13):
        await b.event(call(i))
    (stop,) = b.channel("control").values()
    assert (stop["kind"], stop["crossed"], stop["step_index"]) == ("budget", "steps", 11)
    assert a.channel("control").values() == []
