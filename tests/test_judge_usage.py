"""What each judgement cost and who made it: the server's reported usage summed over the
attempts, its price, the spend caps (past one the server gets no call and the evaluation says
why), the provenance on each judged evaluation, and the counters per model."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.fake_llm import FakeLLM, Reply, tool_call_reply, verdict
from tests.memory import MemoryWorker, memory_worker
from tests.test_rules import GOOD, trace, window_of
from tracejudge.judges.llm.prompt import build_input
from tracejudge.judges.llm.usage import Prices, Tokens, tokens_of
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.verdict.conclude import JudgeJob, Policy, WindowFacts
from tracejudge.prompts import final_judge_prompt
from tracejudge.settings import Settings
from tracejudge.streams.judge.budget import BudgetLimits, SpendBudget
from tracejudge.streams.judge.jobs import record_outcome
from tracejudge.streams.judge.stage import JudgeStage
from tracejudge.streams.shared.metrics import Metrics


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def answered(usage: dict[str, Any] | None, model: str = "judge-2025-01-01") -> Reply:
    reply = tool_call_reply(verdict(True, False))
    body = copy.deepcopy(reply.body)
    body["model"] = model
    if usage is None:
        body.pop("usage")
    else:
        body["usage"] = usage
    return Reply(body=body)


def stage_for(fake: FakeLLM, **env: Any) -> JudgeStage:
    settings = Settings(
        llm_base_url=fake.base_url,
        llm_model="judge-alias",
        redis_url="",
        llm_max_attempts=3,
        **env,
    )
    stage = JudgeStage(settings, None, Policy(), "v")
    # quick retries: the client reads its config at each wait
    stage.client.config = replace(stage.client.config, backoff_base_s=0.01, backoff_max_s=0.02)
    return stage


def job(steps_omitted: int = 0, tool: str = "book") -> JudgeJob:
    window = window_of(trace(GOOD, [(tool, True)]))
    return JudgeJob(
        facts=WindowFacts.of(window),
        rules=RuleJudge().judge(window),
        content=build_input(window, 24_000).content,
        closed_at=time.time(),  # just closed: not past the queue-age bound
        steps_omitted=steps_omitted,
    )


# -- usage as the servers report it ----------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 10, "completion_tokens": 3}, Tokens(10, 3, None)),
        (
            {
                "prompt_tokens": 10,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
            Tokens(10, 3, 8),
        ),
        (
            {"input_tokens": 7, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 0}},
            Tokens(7, 2, 0),
        ),
        (
            {"prompt_tokens": 9, "completion_tokens": 1, "prompt_cache_hit_tokens": 4},
            Tokens(9, 1, 4),
        ),
        ({"prompt_tokens": -1, "completion_tokens": True}, None),  # no count is a count
        ({}, None),
    ],
    ids=["openai", "openai-cached", "input-output-names", "deepseek-cached", "nonsense", "empty"],
)
def test_usage_is_read_under_each_servers_names(
    usage: dict[str, Any], expected: Tokens | None
) -> None:
    assert tokens_of({"usage": usage}) == expected
    assert tokens_of({"choices": []}) is None and tokens_of("not a body") is None


def test_cost_bills_cached_input_at_its_own_price_or_else_the_input_price() -> None:
    tokens = Tokens(input=1_000_000, output=500_000, cached_input=400_000)
    assert Prices(0.15, 0.60, 0.075).cost(tokens) == pytest.approx(0.6 * 0.15 + 0.4 * 0.075 + 0.3)
    assert Prices(0.15, 0.60).cost(tokens) == pytest.approx(0.15 + 0.3)  # errs high


# -- tokens summed over a judgement's attempts -----------------------------------------------


async def test_tokens_summed_equal_what_the_server_reported_over_every_attempt(
    fake: FakeLLM,
) -> None:
    # the first attempt's reply is an error that the server billed (a proxy whose upstream
    # answered, then failed), the retry answers: both count
    billed_error = Reply(
        status=502,
        body={
            "error": {"message": "upstream"},
            "usage": {"prompt_tokens": 1234, "completion_tokens": 7},
        },
    )
    answer = answered(
        {
            "prompt_tokens": 1300,
            "completion_tokens": 55,
            "prompt_tokens_details": {"cached_tokens": 1024},
        }
    )
    fake.script = lambda body, n: billed_error if n == 1 else answer
    stage = stage_for(
        fake,
        llm_price_input_per_mtok=2.0,
        llm_price_cached_input_per_mtok=0.5,
        llm_price_output_per_mtok=8.0,
    )
    metrics = Metrics()
    try:
        verdict_, outcome = await stage.judged(job(steps_omitted=4))
    finally:
        await stage.aclose()
    record_outcome(metrics, outcome)
    e = verdict_.evaluation
    assert e.judge_status == "ok" and fake.count() == 2
    call = e.judge
    assert call is not None
    assert (call.input_tokens, call.output_tokens, call.cached_input_tokens) == (2534, 62, 1024)
    assert call.attempts == 2 and not call.cached
    assert call.cost_usd == pytest.approx(((2534 - 1024) * 2.0 + 1024 * 0.5 + 62 * 8.0) / 1e6)
    # provenance: asked for and answered by, prompt, time, what the prompt left out
    assert (call.requested_model, call.returned_model) == ("judge-alias", "judge-2025-01-01")
    assert call.prompt_version == final_judge_prompt().version
    assert call.latency_s is not None and 0 < call.latency_s < 5
    assert call.steps_omitted == 4 and not call.input_halved
    published = e.model_dump(mode="json")["judge"]
    assert published["input_tokens"] == 2534 and published["returned_model"] == "judge-2025-01-01"
    # the counters per model moved by exactly as much
    labels = {"model": "judge-alias"}
    value = metrics.registry.get_sample_value
    assert value("tracejudge_judge_tokens_total", {**labels, "kind": "input"}) == 2534
    assert value("tracejudge_judge_tokens_total", {**labels, "kind": "output"}) == 62
    assert value("tracejudge_judge_tokens_total", {**labels, "kind": "cached_input"}) == 1024
    assert value("tracejudge_judge_attempts_total", labels) == 2
    assert value("tracejudge_judge_cost_usd_total", labels) == pytest.approx(call.cost_usd)


async def test_an_invalid_answer_is_billed_and_recorded_on_the_fallback(fake: FakeLLM) -> None:
    reply = answered({"input_tokens": 900, "output_tokens": 3})
    reply.body["choices"][0]["message"] = {"role": "assistant", "content": "no idea"}
    fake.script = lambda body, n: reply
    stage = stage_for(fake)
    try:
        e = (await stage.judged(job()))[0].evaluation
    finally:
        await stage.aclose()
    assert (e.judge_status, e.judge_error) == ("fallback", "invalid_output")
    assert e.judge is not None and (e.judge.input_tokens, e.judge.output_tokens) == (900, 3)
    assert e.judge.cost_usd is None  # no prices set: no cost figure


async def test_a_server_without_usage_gives_no_token_figures(fake: FakeLLM) -> None:
    fake.script = lambda body, n: answered(None)
    stage = stage_for(fake, llm_price_input_per_mtok=1, llm_price_output_per_mtok=1)
    try:
        e = (await stage.judged(job()))[0].evaluation
    finally:
        await stage.aclose()
    assert e.judge is not None and e.judge.attempts == 1
    assert (e.judge.input_tokens, e.judge.output_tokens, e.judge.cost_usd) == (None, None, None)


# -- budgets -----------------------------------------------------------------------------------


async def test_past_the_daily_budget_the_server_gets_no_call_and_the_evaluation_says_why(
    fake: FakeLLM,
) -> None:
    fake.script = lambda body, n: answered({"prompt_tokens": 900, "completion_tokens": 150})
    stage = stage_for(fake, llm_budget_tokens_per_day=1000)
    metrics = Metrics()
    try:
        first, out1 = await stage.judged(job(tool="book"))
        second, out2 = await stage.judged(job(tool="pay"))
        third, out3 = await stage.judged(job(tool="mail"))
    finally:
        await stage.aclose()
    for outcome in (out1, out2, out3):
        record_outcome(metrics, outcome)
    assert first.evaluation.judge_status == "ok"  # 1050 tokens: the cap is reached after it
    assert fake.count() == 1
    for skipped in (second.evaluation, third.evaluation):
        assert (skipped.judge_status, skipped.judge_error, skipped.judge) == ("skipped", None, None)
        assert skipped.reasons[-1] == "LLM judge: not judged: daily token budget spent"
        assert skipped.overall_score == skipped.rule_score
    assert (
        metrics.registry.get_sample_value("tracejudge_judge_budget_skips_total", {"period": "day"})
        == 2
    )


async def test_a_spend_budget_per_minute_opens_again_the_next_minute() -> None:
    now = [120.0]
    budget = SpendBudget(None, BudgetLimits(usd_per_minute=0.01), clock=lambda: now[0])
    assert await budget.spent() is None
    await budget.charge(5_000, 0.006)
    assert await budget.spent() is None
    await budget.charge(5_000, 0.006)
    spent = await budget.spent()
    assert (
        spent is not None and spent.note == "LLM judge: not judged: per-minute spend budget spent"
    )
    now[0] = 180.0
    assert await budget.spent() is None


def test_budget_and_price_settings_are_checked_at_start() -> None:
    with pytest.raises(ValueError, match="OUTPUT_PER_MTOK"):
        Settings(llm_price_input_per_mtok=0.15)
    with pytest.raises(ValueError, match="needs TRACEJUDGE_LLM_PRICE_INPUT_PER_MTOK"):
        Settings(llm_budget_usd_per_day=10)
    assert Settings(llm_price_input_per_mtok="unset").llm_price_input_per_mtok is None


# -- provenance through the worker ------------------------------------------------------------


def run(rid: str, tool_ok: bool) -> list[dict[str, Any]]:
    return [
        {"type": "task_started", "request_id": rid, "goal": "book a flight", "step_index": 0},
        {
            "type": "tool_call",
            "request_id": rid,
            "step_index": 1,
            "tool": "search",
            "success": tool_ok,
        },
        {"type": "final_response", "request_id": rid, "step_index": 2, "output": "Booked UA 12."},
    ]


async def judge_pending(w: MemoryWorker) -> None:
    assert w.ctx.judge_jobs is not None
    for job_ in w.channel("judge_requests").values():
        await w.ctx.errors.run(w.record("judge_requests", job_), w.ctx.judge_jobs)


async def test_a_judged_evaluation_carries_its_provenance_and_a_rule_only_one_none(
    fake: FakeLLM,
) -> None:
    fake.script = lambda body, n: answered({"prompt_tokens": 321, "completion_tokens": 12})
    w = memory_worker(
        llm_judge_enabled=True,
        llm_base_url=fake.base_url,
        llm_model="judge-alias",
        llm_sample_rate=0.0,  # only the flagged run is judged
    )
    try:
        for event in run("bad-run", tool_ok=False) + run("good-run", tool_ok=True):
            await w.event(event)
        await judge_pending(w)
    finally:
        if w.ctx.judge_jobs is not None:
            await w.ctx.judge_jobs.aclose()
    by_id = {e["request_id"]: e for e in w.channel("evaluations").values()}
    judged, rules_only = by_id["bad-run"], by_id["good-run"]
    assert judged["judge_status"] == "ok" and rules_only["judge_status"] == "skipped"
    assert "judge" not in rules_only or rules_only["judge"] is None
    call = judged["judge"]
    assert call["requested_model"] == "judge-alias"
    assert call["returned_model"] == "judge-2025-01-01"
    assert call["prompt_version"] == final_judge_prompt().version
    assert (call["input_tokens"], call["output_tokens"], call["attempts"]) == (321, 12, 1)
    assert call["cached"] is False and call["latency_s"] > 0 and call["steps_omitted"] == 0
    exposition = w.ctx.metrics.exposition().decode()
    assert 'tracejudge_judge_tokens_total{kind="input",model="judge-alias"} 321.0' in exposition


async def test_what_the_prompt_left_out_reaches_the_evaluation(fake: FakeLLM) -> None:
    fake.script = lambda body, n: answered({"prompt_tokens": 2000, "completion_tokens": 10})
    w = memory_worker(llm_judge_enabled=True, llm_base_url=fake.base_url, llm_max_input_chars=2000)
    rid = "long-run"
    steps = [
        {
            "type": "tool_call",
            "request_id": rid,
            "step_index": i,
            "tool": "read",
            "success": True,
            "result_preview": f"line {i} " * 40,
        }
        for i in range(1, 30)
    ]
    try:
        for event in [
            *run(rid, tool_ok=False)[:1],
            *steps,
            run(rid, False)[-1] | {"step_index": 30},
        ]:
            await w.event(event)
        (job_,) = w.channel("judge_requests").values()
        await judge_pending(w)
    finally:
        if w.ctx.judge_jobs is not None:
            await w.ctx.judge_jobs.aclose()
    _pending, evaluation = w.channel("evaluations").values()
    assert job_["steps_omitted"] > 0
    assert evaluation["judge"]["steps_omitted"] == job_["steps_omitted"]
