"""A run a `stop` intervention ended before its answer did not reach its goal: its verdict is
incomplete, does not pass, names the stop (reasons, a finding, the low-score alert, the work
left); a run that had answered before the stop was sent, and a steer, are judged as without
them. By the rules on windows built by hand, then through the worker's handlers in memory.
tests/test_stopped_runs.py does the same with the client and the framework integrations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.memory import memory_worker
from tests.test_rules import window_of
from tracejudge.judges.llm.answer import JudgeAnswer
from tracejudge.judges.rules.judge import STOPPED_CAP, RuleJudge
from tracejudge.judges.rules.stops import stop_id
from tracejudge.judges.verdict.conclude import (
    DISABLED,
    JudgeOutcome,
    Policy,
    Verdict,
    WindowFacts,
    conclude,
)
from tracejudge.models.ids import intervention_id
from tracejudge.models.window import Fired, Window

RID = "s1"
judge = RuleJudge()
LOOP_STOP = stop_id(RID, "loop")
BUDGET_STOP = stop_id(RID, "budget")
ANSWER = "Order 7 is paid: 20 EUR, on May 20."


def events(calls: int, final: dict[str, Any] | None = None, **task: Any) -> list[dict[str, Any]]:
    """A run looking order 7 up `calls` times (step i at ts 100 + i), then `final`."""
    found: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": RID, "goal": "Is order 7 paid?", **task}
    ]
    found += [
        {
            "type": "tool_call",
            "request_id": RID,
            "step_index": i,
            "tool": "get_order",
            "args_summary": '{"order_id": 7}',
            "success": True,
            "result_preview": "order 7: paid, 20 EUR",
            "ts": 100.0 + i,
        }
        for i in range(1, calls + 1)
    ]
    return found if final is None else [*found, final]


def answer(output: str = ANSWER, **fields: Any) -> dict[str, Any]:
    return {"type": "final_response", "request_id": RID, "output": output, **fields}


def stopped(
    iid: str, message: str = "The same call keeps giving the same result."
) -> dict[str, Any]:
    """The final response the client and the integrations send when told to stop."""
    return answer(f"stopped: {message}", stopped_by=iid)


def told(evs: list[dict[str, Any]], *fired: Fired) -> Window:
    window = window_of(evs)
    return window.model_copy(update={"interventions": list(fired)})


def verdict_of(window: Window, outcome: JudgeOutcome = DISABLED, **policy: Any) -> Verdict:
    return conclude(
        WindowFacts.of(window), judge.judge(window), outcome, Policy(**policy), "v", 0.0
    )


def same_verdict(a: Verdict, b: Verdict) -> None:
    """Judged alike: the verdict's every part but the interventions listed."""
    skip = {"interventions", "evaluation_id", "saved"}
    assert a.evaluation.model_dump(exclude=skip) == b.evaluation.model_dump(exclude=skip)
    assert (a.reflection is None) == (b.reflection is None) and a.alerts == b.alerts


# -- the rules -------------------------------------------------------------------------------


def test_a_run_a_loop_stop_ended_is_incomplete_fails_and_says_why() -> None:
    run = told(events(3, stopped(LOOP_STOP, "Stop.")), ("loop", "repeated_call", "stop", 3))
    v = verdict_of(run)
    e = v.evaluation
    assert e.success and e.incomplete and not e.passed  # the steps that ran did succeed
    assert e.overall_score <= STOPPED_CAP < e.warn_threshold
    assert ("stopped_by_intervention", "loop repeated_call at step 3") in [
        (f.rule, f.evidence) for f in e.findings
    ]
    said = "stopped by tracejudge for a repeated_call loop at step 3"
    assert any(said in r for r in e.reasons) and said in e.summary
    (low,) = [a for a in v.alerts if a.kind == "low_score"]
    assert said in low.message
    (left,) = e.remaining
    assert (left.kind, left.step) == ("request_pending", "finish the user's request")
    assert left.why == f"the run was {said}"
    # stopped for looping: a follow-up starts afresh, with the findings (docs/interventions.md)
    assert v.reflection is not None and v.reflection.remaining == e.remaining
    # the proof that this can fail: the same run, never told, passes complete
    plain = verdict_of(window_of(events(3, stopped(LOOP_STOP, "Stop."))))
    assert plain.evaluation.passed and not plain.evaluation.incomplete


def test_a_run_with_no_step_after_its_budget_stop_is_stopped_and_not_asked_to_go_on() -> None:
    """It names no intervention (an agent that stopped as told without saying so): no step
    after the crossing is what says it stopped."""
    run = told(events(4, answer("Stopped early.")), ("budget", "tool_calls", "stop", 4))
    v = verdict_of(run)
    e = v.evaluation
    assert e.incomplete and not e.passed and e.success
    assert "stopped_by_intervention" in [f.rule for f in e.findings]
    assert "stopped by its tool_calls budget: no reflection asked" in e.reasons
    assert v.reflection is None and e.chain_final
    assert "for its tool_calls budget at step 4" in v.alerts[0].message


def test_what_the_trace_names_is_the_work_left_before_the_stop() -> None:
    planned = events(3, stopped(BUDGET_STOP), planned_steps=["get_order", "refund"])
    e = verdict_of(told(planned, ("budget", "steps", "stop", 3))).evaluation
    assert e.incomplete and [(r.kind, r.step) for r in e.remaining] == [("planned_step", "refund")]


@pytest.mark.parametrize(
    ("final", "at"),
    [
        (answer(step_index=4), 4),  # its answer crossed the budget (its tokens, its time)
        (answer(step_index=4), None),  # the same, the answer unnumbered by the client
        (answer(ts=102.5), 3),  # unnumbered, made before the crossing call by the run's clock
    ],
    ids=["crossed-by-the-answer", "crossing-unnumbered", "earlier-by-time"],
)
def test_a_run_that_answered_before_the_stop_was_sent_is_judged_on_its_work(
    final: dict[str, Any], at: int | None
) -> None:
    run = told(events(3, final), ("budget", "tokens", "stop", at))
    assert run.final is not None and run.final.stopped_by is None
    v = verdict_of(run)
    (made,) = v.evaluation.interventions
    assert made.stopped_after  # the run made no step after it: as the evaluation says today
    same_verdict(v, verdict_of(window_of(events(3, final))))
    assert v.evaluation.passed and not v.evaluation.incomplete


def test_a_run_that_went_on_after_the_stop_is_judged_on_what_it_did() -> None:
    run = told(events(6, answer()), ("loop", "repeated_call", "stop", 3))
    same_verdict(verdict_of(run), verdict_of(window_of(events(6, answer()))))


@pytest.mark.parametrize("named", [True, False], ids=["named", "no-step-after"])
def test_a_steer_changes_nothing_in_the_verdict(named: bool) -> None:
    steer = intervention_id(RID, "loop", "steer", "repeated_call", 1)
    final = answer(stopped_by=steer) if named else answer()
    run = told(events(3, final), ("loop", "repeated_call", "steer", 3))
    same_verdict(verdict_of(run), verdict_of(window_of(events(3, final))))


def test_the_judge_does_not_take_the_stop_back_and_a_lower_threshold_is_kept_too() -> None:
    run = told(events(3, stopped(LOOP_STOP)), ("loop", "repeated_call", "stop", 3))
    pleased = JudgeAnswer.model_validate(
        {
            "success": True,
            "incomplete": False,
            "summary": "answered the user",
            "correctness": 100,
            "relevance": 100,
            "actionability": 100,
        }
    )
    v = verdict_of(run, JudgeOutcome("ok", answer=pleased))
    e = v.evaluation
    assert e.incomplete and not e.passed and e.overall_score <= STOPPED_CAP
    assert e.summary == "answered the user"
    assert "stopped by tracejudge for a repeated_call loop" in v.alerts[0].message
    low = verdict_of(run, warn_threshold=40).evaluation
    assert not low.passed and low.overall_score == 39


def test_a_stops_id_is_the_one_the_worker_gives_it() -> None:
    for kind, crossed in (("loop", "repeated_call"), ("budget", "cost_usd")):
        assert stop_id(RID, kind) == intervention_id(RID, kind, "stop", crossed, 1)


# -- through the worker's handlers ---------------------------------------------------------------


def call(i: int, result: str = "order 7: paid, 20 EUR", args: str = "7") -> dict[str, Any]:
    return {
        "type": "tool_call",
        "request_id": RID,
        "step_index": i,
        "tool": "get_order",
        "args_summary": args,
        "success": True,
        "result_preview": result,
        "agent_name": "support-bot",
    }


def start() -> dict[str, Any]:
    return {
        "type": "task_started",
        "request_id": RID,
        "step_index": 0,
        "goal": "Is order 7 paid?",
        "agent_name": "support-bot",
    }


def budgets(tmp_path: Path, text: str) -> str:
    path = tmp_path / "budgets.toml"
    path.write_text(text)
    return str(path)


async def test_the_worker_flags_a_run_its_loop_stop_ended(tmp_path: Path) -> None:
    w = memory_worker(budgets_file=budgets(tmp_path, '[default]\nloop_action = "stop"\n'))
    await w.event(start())
    for i in range(1, 4):
        await w.event(call(i))
    (stop,) = w.channel("control").values()
    assert stop["action"] == "stop"
    await w.event({**stopped(stop["intervention_id"]), "step_index": 4})
    (e,) = w.channel("evaluations").values()
    assert e["incomplete"] and not e["passed"] and e["success"]
    assert "stopped_by_intervention" in [f["rule"] for f in e["findings"]]
    (alert,) = w.channel("alerts").values()
    assert alert["kind"] == "low_score" and "repeated_call loop at step 3" in alert["message"]
    (reflection,) = w.channel("reflections").values()
    assert reflection["remaining"][0]["why"].startswith("the run was stopped by tracejudge")


async def test_the_worker_flags_a_budget_stop_and_asks_for_no_follow_up(tmp_path: Path) -> None:
    w = memory_worker(budgets_file=budgets(tmp_path, "[default]\ntool_calls = 3\n"))
    await w.event(start())
    for i in range(1, 5):
        await w.event(call(i, f"order {i}: paid", args=str(i)))
    (stop,) = w.channel("control").values()
    await w.event({**stopped(stop["intervention_id"]), "step_index": 5})
    (e,) = w.channel("evaluations").values()
    assert e["incomplete"] and not e["passed"]
    assert "stopped by its tool_calls budget: no reflection asked" in e["reasons"]
    assert w.channel("reflections").values() == []
    assert "tool_calls budget" in w.channel("alerts").values()[0]["message"]


async def test_the_worker_judges_an_answer_that_crossed_the_budget_on_its_work(
    tmp_path: Path,
) -> None:
    w = memory_worker(budgets_file=budgets(tmp_path, "[default]\ntokens = 1000\n"))
    await w.event(start())
    await w.event(call(1))
    usage = {"model": "m", "input_tokens": 900, "output_tokens": 200}
    await w.event({**answer(), "step_index": 2, "usage": usage, "agent_name": "support-bot"})
    (stop,) = w.channel("control").values()  # sent on the answer itself, too late to stop it
    assert stop["step_index"] == 2
    (e,) = w.channel("evaluations").values()
    assert e["passed"] and not e["incomplete"] and e["interventions"][0]["stopped_after"]
    assert "stopped_by_intervention" not in [f["rule"] for f in e["findings"]]


async def test_the_worker_judges_a_steered_run_as_any_other() -> None:
    w = memory_worker()  # an agent with no normal yet is only steered
    await w.event(start())
    for i in range(1, 4):
        await w.event(call(i))
    (steer,) = w.channel("control").values()
    assert steer["action"] == "steer"
    await w.event({**answer(), "step_index": 4, "stopped_by": steer["intervention_id"]})
    (e,) = w.channel("evaluations").values()
    assert not e["incomplete"] and "stopped_by_intervention" not in str(e["findings"])
