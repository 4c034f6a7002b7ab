"""Per-request budgets (judges/inflight/budgets.py): the file, validated with one clear error;
limits per agent; each limit found once, on the event that crosses it, and every event counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracejudge.judges.inflight.budgets import Budget, BudgetBook, BudgetsError
from tracejudge.judges.inflight.loops import LoopRules
from tracejudge.judges.inflight.spend import BudgetWatch

FILE = """
[default]
steps = 10
cost_usd = 1.5

[agents."swe-agent/*"]
cost_usd = 3.0
wall_s = 60

[agents."swe-agent/gpt-4o"]
steps = 40
"""


def test_an_exact_name_wins_then_the_first_pattern_and_the_default_fills_in(
    tmp_path: Path,
) -> None:
    path = tmp_path / "budgets.toml"
    path.write_text(FILE)
    book = BudgetBook.read(path)
    assert book.for_agent("swe-agent/gpt-4o") == Budget(steps=40, cost_usd=1.5)
    assert book.for_agent("swe-agent/doubao") == Budget(steps=10, cost_usd=3.0, wall_s=60)
    assert book.for_agent("support-bot") == book.for_agent(None) == Budget(steps=10, cost_usd=1.5)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[default]\nsteps = -1", "[default]: steps = -1: a positive number"),
        ("[default]\nstep = 3", "unknown limit 'step'"),
        ("[default]\nsteps = 2.5", "steps = 2.5: a whole number"),
        ('[agents."x"]\ncost_usd = "5"', "[agents.\"x\"]: cost_usd = '5': a positive number"),
        ("[defaults]\nsteps = 3", "unknown table(s) defaults"),
        ("[default\nsteps = 3", "not TOML"),
        ("[default]\nsteps = true", "steps = True: a positive number"),
    ],
)
def test_a_bad_file_is_one_clear_error(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "budgets.toml"
    path.write_text(text)
    with pytest.raises(BudgetsError, match=None) as caught:
        BudgetBook.read(path)
    assert said in str(caught.value) and str(path) in str(caught.value)


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(BudgetsError, match="No such file"):
        BudgetBook.read(tmp_path / "none.toml")


def test_each_limit_is_crossed_once_and_every_step_counted() -> None:
    watch = BudgetWatch(Budget(steps=3, tool_calls=2, tokens=1000, cost_usd=0.05, wall_s=30))
    crossed = []
    for i in range(8):
        for c in watch.observe(
            step=True, tool_call=i % 2 == 0, tokens=200, cost_usd=0.01, at=100.0 + i * 5
        ):
            crossed.append((i, c.limit, c.allowed, c.used))
    assert crossed == [
        (3, "steps", 3, 4),
        (4, "tool_calls", 2, 3),
        (5, "tokens", 1000, 1200),
        (5, "cost_usd", 0.05, pytest.approx(0.06)),
        (7, "wall_s", 30, 35.0),
    ]
    assert (watch.steps, watch.tool_calls, watch.tokens) == (8, 4, 1600)


def test_no_budget_crosses_nothing() -> None:
    watch = BudgetWatch(Budget())
    assert all(not watch.observe(step=True, tool_call=True, tokens=10**9) for _ in range(100))


def test_an_agent_can_have_its_own_loop_thresholds() -> None:
    book = BudgetBook.of(
        {"default": {"loop_no_new_result": 12}, "agents": {"poll*": {"loop_repeat": 0}}}
    )
    base = LoopRules()
    poller = book.for_agent("poller").loop_rules(base)
    assert (poller.repeat, poller.no_new_result, poller.cycles) == (0, 12, base.cycles)
    other = book.for_agent("coder").loop_rules(base)
    assert (other.repeat, other.no_new_result) == (base.repeat, 12)
    assert BudgetBook().for_agent("coder").loop_rules(base) is base


@pytest.mark.parametrize(
    ("value", "says"), [(1, "0 \\(off\\), or from 2"), (2.5, "a whole number"), (True, "whole")]
)
def test_a_bad_loop_threshold_is_refused_with_its_place(value: object, says: str) -> None:
    with pytest.raises(BudgetsError, match=f'budgets \\[agents."x"\\]: loop_repeat = .*{says}'):
        BudgetBook.of({"agents": {"x": {"loop_repeat": value}}})
