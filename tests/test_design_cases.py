"""The design documents' own examples, one row each, with the verdict the document states.

Four documents stand behind tracejudge: success vs incomplete and the reflection trigger (seed
000), online evaluation with a rule + LLM hybrid (seed 001), the adaptive iteration count (seed
002) and generic/clarification retries (seed 004). Every row runs through the product's own
handlers (the worker's, in memory) or its pure judges, never a copy of their logic.

Where a document contradicts itself, its table wins: a run whose every planned step was
attempted and one failed is success=false, incomplete=false (the table's fourth quadrant), not
incomplete=true as one of its examples has it. These rows are the four quadrant cases.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.memory import memory_worker
from tracejudge.judges.llm.answer import parse_answer
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.verdict.conclude import (
    DISABLED,
    JudgeOutcome,
    Policy,
    WindowFacts,
    conclude,
)
from tracejudge.models.events import parse_event
from tracejudge.models.window import assemble_window

RID = "design-1"

# --- seed 000: success and incomplete are two verdicts; incomplete triggers reflection ------


def call(i: int, tool: str, ok: bool = True) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "request_id": RID,
        "step_index": i,
        "tool": tool,
        "args_summary": f'{{"step": {i}}}',
        "success": ok,
        "result_preview": "ok" if ok else "",
        "error": None if ok else f"{tool}: connection refused",
    }


def run(planned: list[str], calls: list[tuple[str, bool]], output: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {
            "type": "task_started",
            "request_id": RID,
            "step_index": 0,
            "goal": "check the three services and report",
            "planned_steps": planned,
        }
    ]
    events += [call(i + 1, tool, ok) for i, (tool, ok) in enumerate(calls)]
    events.append({"type": "final_response", "request_id": RID, "output": output})
    return events


PINGS = ["ping_api", "ping_web", "ping_db"]


@dataclass(frozen=True)
class VerdictCase:
    name: str
    events: list[dict[str, Any]]
    success: bool
    incomplete: bool
    reflection: bool


SEED_000 = [
    VerdictCase(
        "every step ran and succeeded: success, complete, no reflection",
        run(
            PINGS,
            [(t, True) for t in PINGS],
            "All three services answered: api 200 in 41 ms, web 200 in 63 ms, db ok in 5 ms.",
        ),
        success=True,
        incomplete=False,
        reflection=False,
    ),
    VerdictCase(
        "the steps that ran succeeded but steps remain: success and incomplete, reflection",
        run(
            PINGS,
            [("ping_api", True), ("ping_web", True)],
            "The api answered 200 in 41 ms and the web front 200 in 63 ms.",
        ),
        success=True,
        incomplete=True,
        reflection=True,
    ),
    VerdictCase(
        "a step failed and the rest never ran: failed and incomplete, reflection",
        run(
            PINGS,
            [("ping_api", False)],
            "The api refused the connection, so I stopped there.",
        ),
        success=False,
        incomplete=True,
        reflection=True,
    ),
    VerdictCase(
        "every step ran, one failed, all reported (the table's fourth quadrant): no reflection",
        run(
            PINGS,
            [("ping_api", True), ("ping_web", True), ("ping_db", False)],
            "api answered 200 in 41 ms, web answered 200 in 63 ms; db refused the connection.",
        ),
        success=False,
        incomplete=False,
        reflection=False,
    ),
    *[
        # a planned step that failed and was never made good is a failed step wherever it came;
        # made good by a later successful attempt, it is how agents correct themselves
        VerdictCase(
            f"the {where} planned step failed{' and was retried' if retried else ''}, "
            f"{'made good' if fixed else 'never made good'}, the rest succeeded, answer truthful",
            run(PINGS, calls, answer),
            success=fixed,
            incomplete=False,
            reflection=False,
        )
        for where, retried, fixed, calls, answer in [
            (
                "first",
                False,
                False,
                [("ping_api", False), ("ping_web", True), ("ping_db", True)],
                "api refused the connection; web answered 200 in 63 ms, db ok in 5 ms.",
            ),
            (
                "middle",
                False,
                False,
                [("ping_api", True), ("ping_web", False), ("ping_db", True)],
                "api answered 200 in 41 ms; web refused the connection; db ok in 5 ms.",
            ),
            (
                "last",
                False,
                False,
                [("ping_api", True), ("ping_web", True), ("ping_db", False)],
                "api answered 200 in 41 ms, web 200 in 63 ms; db refused the connection.",
            ),
            (
                "middle",
                True,
                False,
                [("ping_api", True), ("ping_web", False), ("ping_web", False), ("ping_db", True)],
                "api answered 200 in 41 ms; web refused the connection twice; db ok in 5 ms.",
            ),
            (
                "first",
                True,
                True,
                [("ping_api", False), ("ping_api", True), ("ping_web", True), ("ping_db", True)],
                "All three answered: api 200 on the second try, web 200 in 63 ms, db ok in 5 ms.",
            ),
            (
                "middle",
                True,
                True,
                [("ping_api", True), ("ping_web", False), ("ping_web", True), ("ping_db", True)],
                "All three answered: api 200 in 41 ms, web 200 on the second try, db ok in 5 ms.",
            ),
            (
                "last",
                True,
                True,
                [("ping_api", True), ("ping_web", True), ("ping_db", False), ("ping_db", True)],
                "All three answered: api 200 in 41 ms, web 200 in 63 ms, db ok on the second try.",
            ),
        ]
    ],
    VerdictCase(
        "planned steps in words, the first attempt failed and no later call of its tool "
        "succeeded: failed, complete",
        run(
            ["check the api service", "check the web front", "check the database"],
            [("http_get_api", False), ("http_get_web", True), ("http_get_db", True)],
            "The api refused the connection; the web front answered 200 and the database ok.",
        ),
        success=False,
        incomplete=False,
        reflection=False,
    ),
    VerdictCase(
        "planned steps written in words, as many attempted as planned: complete",
        run(
            ["check the api service", "check the web front"],
            [("http_get", True), ("http_get_web", True)],
            "The api answered 200 in 41 ms and the web front 200 in 63 ms.",
        ),
        success=True,
        incomplete=False,
        reflection=False,
    ),
    VerdictCase(
        "planned steps written in words, fewer attempted than planned: incomplete",
        run(
            ["check the api service", "check the web front", "check the database"],
            [("http_get", True)],
            "The api answered 200 in 41 ms.",
        ),
        success=True,
        incomplete=True,
        reflection=True,
    ),
]


@pytest.mark.parametrize("case", SEED_000, ids=[c.name for c in SEED_000])
async def test_seed_000_rule_verdicts(case: VerdictCase) -> None:
    w = memory_worker()
    for event in case.events:
        await w.event(event)
    (evaluation,) = w.channel("evaluations").values()
    assert (evaluation["success"], evaluation["incomplete"]) == (case.success, case.incomplete)
    assert bool(w.channel("reflections").sent) is case.reflection


def window_of(events: list[dict[str, Any]]) -> Any:
    return assemble_window(
        RID,
        [parse_event(json.dumps(e).encode()) for e in events],
        closed_by="final_response",
        step_count=len(events) - 2,
        steps_dropped=0,
    )


def judged(
    answer: dict[str, Any] | str, events: list[dict[str, Any]] | None = None, **policy: Any
) -> Any:
    """The request judged with the given model answer (arguments of a final_judge call, or a
    message content), as the judge stage concludes it."""
    window = window_of(events or SEED_000[0].events)
    rules = RuleJudge().judge(window)
    if isinstance(answer, str):
        message: dict[str, Any] = {"role": "assistant", "content": answer}
    else:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "final_judge", "arguments": json.dumps(answer)},
                }
            ],
        }
    parsed = parse_answer({"choices": [{"message": message}]})
    outcome = JudgeOutcome("ok", answer=parsed)
    return conclude(WindowFacts.of(window), rules, outcome, Policy(**policy), "v", 0.0), rules


@pytest.mark.parametrize(
    ("name", "answer", "success", "incomplete", "reflection"),
    [
        (
            "the judge says success and incomplete: reflection",
            {"success": True, "incomplete": True},
            True,
            True,
            True,
        ),
        ("incomplete missing is false", {"success": True}, True, False, False),
        (
            'incomplete "yes" is not true: false',
            {"success": True, "incomplete": "yes"},
            True,
            False,
            False,
        ),
        ('incomplete "" is false', {"success": True, "incomplete": ""}, True, False, False),
        (
            "booleans as strings in any case",
            {"success": "TRUE", "incomplete": "true"},
            True,
            True,
            True,
        ),
        (
            "failed steps named the seed's way",
            {
                "success": False,
                "incomplete": False,
                "failedSteps": [{"aiName": "ping_db", "reason": "refused"}],
            },
            False,
            False,
            False,
        ),
    ],
)
def test_seed_000_judge_answers(
    name: str, answer: dict[str, Any], success: bool, incomplete: bool, reflection: bool
) -> None:
    verdict, _ = judged(answer)
    e = verdict.evaluation
    assert e.judge_status == "ok"
    assert (e.success, e.incomplete) == (success, incomplete)
    assert (verdict.reflection is not None) is reflection


def test_seed_000_reflection_stops_at_its_round_limit() -> None:
    events = SEED_000[1].events
    events = [{**events[0], "reflection_round": 2}, *events[1:]]
    window = window_of(events)
    verdict = conclude(
        WindowFacts.of(window), RuleJudge().judge(window), DISABLED, Policy(), "v", 0
    )
    assert verdict.evaluation.incomplete and verdict.reflection is None
    assert [a.kind for a in verdict.alerts if a.kind == "reflection_exhausted"]


# --- seed 001: online evaluation, rules blended with an LLM judge ----------------------------


def test_seed_001_the_answer_shape_keeps_the_judges_scores_and_the_rules_verdict() -> None:
    answer = {"correctness": 80, "relevance": 90, "actionability": 70, "reasons": ["fine"]}
    for given in (answer, json.dumps(answer)):
        verdict, rules = judged(given)
        e = verdict.evaluation
        assert e.judge_status == "ok" and e.llm_score == 80
        assert e.overall_score == round(0.6 * rules.rule_score + 0.4 * 80)
        assert (e.success, e.incomplete) == (rules.success, rules.incomplete)
        assert e.dimension_scores.model_dump() == {
            "completeness": rules.completeness,
            "execution_health": rules.execution_health,
            "efficiency": rules.efficiency,
            "correctness": 80,
            "relevance": 90,
            "actionability": 70,
        }


def test_seed_001_the_threshold_is_tested_before_rounding() -> None:
    # rule 59, judge 61: 0.6 * 59 + 0.4 * 61 = 59.8, shown as 60, and below the threshold
    events = SEED_000[0].events
    window = window_of(events)
    rules = RuleJudge().judge(window).model_copy(update={"rule_score": 59, "rule_exact": 59.0})
    answer = parse_answer(
        {
            "choices": [
                {
                    "message": {
                        "content": json.dumps(
                            {
                                "success": True,
                                "incomplete": False,
                                "correctness": 61,
                                "relevance": 61,
                                "actionability": 61,
                            }
                        )
                    }
                }
            ]
        }
    )
    verdict = conclude(
        WindowFacts.of(window), rules, JudgeOutcome("ok", answer=answer), Policy(), "v", 0.0
    )
    assert verdict.evaluation.overall_score == 60 and verdict.evaluation.passed is False
    assert [a.kind for a in verdict.alerts] == ["low_score"]


@pytest.mark.parametrize(("score", "severity"), [(45.0, "warning"), (25.0, "critical")])
def test_seed_001_a_low_score_alerts_critical_below_half_the_threshold(
    score: float, severity: str
) -> None:
    window = window_of(SEED_000[0].events)
    rules = (
        RuleJudge()
        .judge(window)
        .model_copy(update={"rule_score": round(score), "rule_exact": score})
    )
    verdict = conclude(WindowFacts.of(window), rules, DISABLED, Policy(), "v", 0.0)
    (alert,) = verdict.alerts
    assert (alert.kind, alert.severity) == ("low_score", severity)


def test_seed_001_a_judge_that_fails_falls_back_to_the_rule_score() -> None:
    window = window_of(SEED_000[0].events)
    rules = RuleJudge().judge(window)
    outcome = JudgeOutcome("fallback", error="invalid_output")
    e = conclude(WindowFacts.of(window), rules, outcome, Policy(), "v", 0.0).evaluation
    assert (e.overall_score, e.llm_score, e.judge_error) == (
        rules.rule_score,
        None,
        "invalid_output",
    )


async def test_seed_001_enabled_false_counts_events_and_judges_nothing() -> None:
    w = memory_worker(enabled=False)
    for event in SEED_000[0].events:
        await w.event(event)
    assert w.channel("evaluations").sent == []
    assert w.ctx.counters["events_counted_final_response"] == 1


async def test_seed_001_trace_capture_false_still_judges_the_request() -> None:
    w = memory_worker(trace_capture=False)
    for event in SEED_000[2].events:
        await w.event(event)
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["success"] is False  # the failed call's outcome is kept, not its text


# --- seed 002: the adaptive iteration count -------------------------------------------------


def rounds(
    *responses: str | tuple[str, str], max_iterations: int | None = 5
) -> list[dict[str, Any]]:
    events = []
    for i, item in enumerate(responses, start=1):
        response, observation = item if isinstance(item, tuple) else (item, "")
        event: dict[str, Any] = {
            "type": "iteration",
            "request_id": RID,
            "step_index": i,
            "iteration": i,
            "response": response,
            "observation": observation,
        }
        if max_iterations is not None:
            event["max_iterations"] = max_iterations
        events.append(event)
    return events


EXP = "<Hypothesis>the loader drops rows</Hypothesis><Experiment>run the tests</Experiment>"
DONE = "<Conclusion>The loader drops rows with an empty id.</Conclusion>"


@dataclass(frozen=True)
class LoopCase:
    name: str
    events: list[dict[str, Any]]
    decisions: list[tuple[int, str, str]]
    settings: dict[str, Any] = field(default_factory=dict)


SEED_002 = [
    LoopCase("a conclusion in round 2 of 5: stop", rounds(EXP, DONE), [(2, "stop", "conclusion")]),
    LoopCase(
        "a conclusion in round 4: stop there",
        rounds(EXP, EXP, EXP, EXP + DONE, EXP),
        [(4, "stop", "conclusion")],
    ),
    LoopCase("never done: all five rounds, no decision", rounds(EXP, EXP, EXP, EXP, EXP), []),
    LoopCase(
        "a conclusion in round 1 waits for min_iterations (2)",
        rounds(EXP + DONE, EXP),
        [(2, "stop", "conclusion")],
    ),
    LoopCase(
        "TaskStatus complete without a conclusion: finalize",
        rounds(EXP, EXP + "<TaskStatus>complete</TaskStatus>"),
        [(2, "finalize", "task_status")],
    ),
    LoopCase(
        "TaskStatus complete with a conclusion: stop",
        rounds(EXP, DONE + "<TaskStatus>complete</TaskStatus>"),
        [(2, "stop", "conclusion")],
    ),
    LoopCase(
        "TaskStatus incomplete: nothing",
        rounds(EXP, EXP + "<TaskStatus>incomplete</TaskStatus>"),
        [],
    ),
    LoopCase(
        "an observation that shows success: finalize",
        rounds(EXP, (EXP, "Saved successfully. 0 errors.")),
        [(2, "finalize", "observation_success")],
    ),
    LoopCase(
        "all tests pass: finalize",
        rounds(EXP, (EXP, "all tests pass")),
        [(2, "finalize", "observation_success")],
    ),
    LoopCase(
        "success words beside an exception: nothing",
        rounds(EXP, (EXP, "Saved successfully. ValueError: bad value")),
        [],
    ),
    LoopCase(
        "success words beside an error: nothing",
        rounds(EXP, (EXP, "saved successfully, but an error occurred while uploading")),
        [],
    ),
    LoopCase(
        "an error before the success words: nothing",
        rounds(EXP, (EXP, "RuntimeError: x; tests passed")),
        [],
    ),
    LoopCase(
        "Traceback: nothing",
        rounds(EXP, (EXP, "Traceback (most recent call last): tests passed")),
        [],
    ),
    LoopCase(
        "Chinese signals: 已保存 finalizes",
        rounds(EXP, (EXP, "文件已保存")),
        [(2, "finalize", "observation_success")],
    ),
    LoopCase(
        "a round with no <Experiment> code: stop",
        rounds(EXP, "<Hypothesis>nothing left to try</Hypothesis>"),
        [(2, "stop", "no_experiment")],
    ),
    LoopCase(
        "no max_iterations on the events: the design's 5 applies, round 5 decides nothing",
        rounds(EXP, EXP, EXP, EXP, (EXP, "all tests pass"), max_iterations=None),
        [],
    ),
]


@pytest.mark.parametrize("case", SEED_002, ids=[c.name for c in SEED_002])
async def test_seed_002_early_stop(case: LoopCase) -> None:
    w = memory_worker(**case.settings)
    for event in case.events:
        await w.event(event)
    got = [(d["iteration"], d["action"], d["reason"]) for d in w.channel("control").values()]
    assert [d for d in got if d[1] != "hint"] == case.decisions


# --- seed 004: generic and clarification-only answers -----------------------------------------

FILLER = "I'm ready to assist you with whatever you need. "


@pytest.mark.parametrize(
    ("prompt", "response", "retry"),
    [
        ("hello", "How can I help you?", False),
        ("analyze this repo", "Could you clarify?", True),
        ("hello", "Ready to assist", True),
        ("debug this", "I can see this is...\n\nLet me analyze...", False),
        ("你好", "你好！有什么可以帮您的吗？", False),
        ("hi", "What can I help with?", False),
        ("test", "It looks like you sent 'test'. What would you like me to do?", False),
        ("Summarize", "What would you like me to summarize? Please paste the text.", False),
        ("分析这个仓库的性能问题", "收到，正在准备上下文……", True),
        (
            "Refactor the billing module",
            "Understood. I'm setting up the context for this task.",
            True,
        ),
        # patterns apply only to answers under 800 characters
        ("Refactor the billing module", (FILLER * 20)[:899], False),
        # a failure report is a result, not filler
        ("分析 data.csv 的销售趋势", "步骤2文件读取失败，后续分析无法进行。", False),
    ],
)
async def test_seed_004_retries(prompt: str, response: str, retry: bool) -> None:
    w = memory_worker()
    await w.response(
        {"type": "model_response", "session_id": "s-1", "prompt": prompt, "response": response}
    )
    retries = w.channel("retries").values()
    assert bool(retries) is retry
    if retry:
        (request,) = retries
        chinese = any("\u4e00" <= ch <= "\u9fff" for ch in prompt)
        assert (request["continue_prompt"] == "继续") is chinese
