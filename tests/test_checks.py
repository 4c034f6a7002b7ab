"""A team's checks, in code and in a file, on runs built as the worker holds them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.test_rules import window_of
from tracejudge.judges.checks import Failure
from tracejudge.judges.checks.book import CheckBook, ChecksError, run_all
from tracejudge.judges.checks.view import RunView, run_of
from tracejudge.models.events import parse_event


def refund_run(amount: str, *, confirmed: bool = True) -> list[dict[str, Any]]:
    rid = "c1"
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": rid, "goal": "refund order 7",
         "agent_name": "support-bot"},
        {"type": "tool_call", "request_id": rid, "step_index": 1, "tool": "get_order",
         "args_summary": '{"order_id": 7}', "success": True,
         "result_preview": "order 7: total 54.90"},
        {"type": "user_message", "request_id": rid, "step_index": 2,
         "text": "yes, go ahead" if confirmed else "how much would I get?"},
        {"type": "tool_call", "request_id": rid, "step_index": 3, "tool": "refund",
         "args_summary": f'{{"amount": {amount}}}', "success": True},
        {"type": "final_response", "request_id": rid, "output": f"Refunded {amount}."},
    ]  # fmt: skip
    return events


def book(tmp_path: Path, text: str, names: str = "") -> CheckBook:
    path = tmp_path / "checks.toml"
    path.write_text(text)
    return CheckBook.read(names, str(path), entry_points_on=False)


def test_a_code_check_named_in_settings_finds_its_failure_on_the_step(tmp_path: Path) -> None:
    checks = CheckBook.read("tests.team_checks:refund_within_total", entry_points_on=False)
    found = run_all(checks.for_agent("support-bot"), run_of(window_of(refund_run("80.00"))))
    assert [(c.name, f.step, f.severity) for c, f in found] == [
        ("tests.team_checks:refund_within_total", 3, "fail")
    ]
    assert run_all(checks.for_agent("support-bot"), run_of(window_of(refund_run("20.00")))) == []


def test_checks_without_code_per_agent_pattern(tmp_path: Path) -> None:
    checks = book(
        tmp_path,
        '[default]\nnever_call = ["drop_database"]\n\n'
        '[agents."support-*"]\nneeds_confirmation = ["refund"]\n'
        'final_must_not_match = ["(?i)will arrive by"]\nmax_calls = {get_order = 0}\n'
        'call_before = [["get_order", "refund"]]\n',
    )
    unconfirmed = run_of(window_of(refund_run("20.00", confirmed=False)))
    found = {c.name: f for c, f in run_all(checks.for_agent("support-bot"), unconfirmed)}
    assert found["needs_confirmation"].step == 3 and found["max_calls"].step == 1
    assert "call_before" not in found  # the look-up came first
    assert [c.name for c in checks.for_agent("other")] == ["never_call"]
    assert all(
        c.per_step for c in checks.for_agent("support-bot") if c.name != "final_must_not_match"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[default]\nnever_cal = ["x"]\n', "unknown check 'never_cal'"),
        ('[default]\nmax_calls = {x = "3"}\n', "a table {tool = most calls}"),
        ('[default]\nfinal_must_match = ["(unclosed"]\n', "does not compile"),
        ('[default]\ncode = ["tests.team_checks:nothing_here"]\n', "cannot be imported"),
        ('[agents."x"]\ncall_before = [["a"]]\n', 'pairs ["first", "then"]'),
        ("[defaults]\n", "unknown table"),
    ],
)
def test_a_bad_checks_file_is_one_error_naming_the_table_and_key(
    tmp_path: Path, text: str, says: str
) -> None:
    with pytest.raises(ChecksError, match=None) as raised:
        book(tmp_path, text)
    assert says in str(raised.value) and "checks file" in str(raised.value)


def test_a_check_says_its_version_and_a_wrong_answer_is_refused() -> None:
    checks = CheckBook.read(
        "tests.team_checks:no_shouting,tests.team_checks:broken", entry_points_on=False
    )
    shouting, broken = checks.for_agent(None)
    assert (shouting.version, shouting.per_step, shouting.action) == ("2", True, "steer")
    run = run_of(
        window_of(
            [
                *refund_run("1")[:-1],
                {"type": "final_response", "request_id": "c1", "output": "DONE"},
            ]
        )
    )
    assert shouting.failures(run) == [Failure("the answer shouts", severity="note")]
    with pytest.raises(RuntimeError):
        broken.failures(run)
    with pytest.raises(ValueError, match="needs a message"):
        Failure("")


def test_the_shipped_example_checks_load_and_find_what_they_say() -> None:
    root = Path(__file__).resolve().parents[1]
    airline = CheckBook.read("", str(root / "examples" / "checks" / "airline.toml"), False)
    unconfirmed = run_of(window_of(refund_run("20.00", confirmed=False)))
    assert run_all(airline.for_agent("any"), unconfirmed) == []  # no airline tools in it
    booking: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": "b", "goal": "book it"},
        {"type": "tool_call", "request_id": "b", "step_index": 1, "tool": "book_reservation",
         "args_summary": '{"passengers": [1, 2, 3, 4, 5, 6]}', "success": True},
        {"type": "final_response", "request_id": "b", "output": "Booked."},
    ]  # fmt: skip
    found = {
        c.name: f.step for c, f in run_all(airline.for_agent("any"), run_of(window_of(booking)))
    }
    assert found == {
        "examples.checks.airline:at_most_five_passengers": 1,
        "needs_confirmation": 1,
        "call_before": 1,
    }
    coding = CheckBook.read(
        "examples.checks.coding:ran_before_submit,"
        "examples.checks.coding:no_edits_outside_the_repository",
        entry_points_on=False,
    )
    submitted: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": "s", "goal": "fix it"},
        {"type": "tool_call", "request_id": "s", "step_index": 1, "tool": "create",
         "args_summary": "create /etc/hosts", "success": True},
        {"type": "tool_call", "request_id": "s", "step_index": 2, "tool": "submit",
         "args_summary": "submit", "success": True},
    ]  # fmt: skip
    found_coding = run_all(coding.for_agent(None), run_of(window_of(submitted)))
    assert [(f.step, f.severity) for _, f in found_coding] == [(2, "note"), (1, "fail")]


def test_the_view_kept_from_events_is_the_view_of_the_stored_window() -> None:
    """What the per-step checks read, kept from the events as they arrive (out of order
    too), is what a check reads from the stored window; its texts masked like it."""
    events = refund_run("20.00")
    late = {**events[1], "step_index": 4, "tool": "notify", "args_summary": "mail a@b.example"}
    arriving = [events[0], events[2], events[3], late, events[1]]  # step 1 comes last
    kept = RunView(request_id="c1")
    for event in arriving:
        kept.add(parse_event(event))
    whole = run_of(window_of(arriving))
    assert kept.run() == replace(whole, final_answer=None)
    assert [s.index for s in kept.run().steps] == [1, 2, 3, 4]
    (notify,) = kept.run().calls("notify")
    assert "a@b.example" not in (notify.args or "") and "a@b.example" not in repr(notify)


def test_a_step_view_is_read_only() -> None:
    (step,) = run_of(window_of(refund_run("20.00"))).calls("refund")
    with pytest.raises(AttributeError):
        step.tool = "other"  # type: ignore[misc]
