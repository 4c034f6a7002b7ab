"""A judge answer cut at its token limit (`finish_reason: "length"`, as a real llama.cpp server
gives in both output modes, and a reasoning model whose hidden reasoning spent the budget) is
its own error, `truncated`, asked once more with a larger budget: against the scripted
OpenAI-compatible server on loopback."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fake_llm import FakeLLM, Reply, content_reply, tool_call_reply, verdict
from tests.test_judge_usage import job, stage_for
from tests.test_llm_judge import client_for
from tracejudge.judges.llm.breaker import CircuitBreaker
from tracejudge.judges.llm.client import JudgeError
from tracejudge.judges.llm.prompt import estimate_tokens, input_token_budget
from tracejudge.prompts import final_judge_prompt

CONTENT = "Judge this.\n<data>\n{}\n</data>"
ANSWER = json.dumps(verdict(True, False, 90))


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def cut(reply: Reply) -> Reply:
    """`reply` as a server gives it when the answer reached max_tokens."""
    body = copy.deepcopy(reply.body)
    body["choices"][0]["finish_reason"] = "length"
    return Reply(body=body)


CUT_TOOL_CALL = cut(tool_call_reply(ANSWER[: len(ANSWER) // 2]))  # arguments left unclosed
CUT_CONTENT = cut(content_reply(ANSWER[:40]))  # json_schema mode: the object left unclosed
REASONING_ONLY = cut(content_reply(""))  # the hidden reasoning spent it all: no answer yet
REASONING_ONLY.body["choices"][0]["message"] = {"role": "assistant", "content": None}


def budgets(fake: FakeLLM, name: str = "max_tokens") -> list[int]:
    return [body[name] for body in fake.requests]


async def judge(fake: FakeLLM, script: Any, **config: Any) -> Any:
    fake.script = script
    client = client_for(fake.base_url, **config)
    try:
        return await client.judge(CONTENT)
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("first", "output_mode"),
    [(CUT_TOOL_CALL, "tools"), (CUT_CONTENT, "json_schema"), (REASONING_ONLY, "tools")],
)
async def test_a_cut_answer_is_asked_once_more_with_twice_the_budget(
    fake: FakeLLM, first: Reply, output_mode: str
) -> None:
    whole = content_reply(ANSWER) if output_mode == "json_schema" else tool_call_reply(ANSWER)
    answer = await judge(
        fake, lambda body, n: first if n == 1 else whole, max_tokens=300, output_mode=output_mode
    )
    assert (answer.success, answer.incomplete, answer.llm_score) == (True, False, 90)
    assert budgets(fake) == [300, 600]


async def test_cut_again_it_is_truncated_not_invalid_output_and_the_breaker_is_not_told(
    fake: FakeLLM,
) -> None:
    breaker = CircuitBreaker(1, 30)  # one failure would open it
    with pytest.raises(JudgeError) as caught:
        await judge(fake, lambda body, n: CUT_TOOL_CALL, max_tokens=300, breaker=breaker)
    assert caught.value.code == "truncated" and "finish_reason length" in caught.value.detail
    assert budgets(fake) == [300, 600]  # once more, not more
    assert breaker.state == "closed"  # the server answered: it is not failing


@pytest.mark.parametrize(
    ("config", "sent"),
    [
        ({"retry_max_tokens": 450}, [300, 450]),  # twice, within the configured maximum
        ({"retry_max_tokens": 5000}, [300, 600]),  # a maximum, not a target
        ({"retry_max_tokens": 0}, [300]),  # no retry
        ({"retry_max_tokens": 300}, [300]),  # none larger: no retry
        ({"token_param": "max_completion_tokens"}, [300, 600]),  # a reasoning model's name
    ],
)
async def test_the_retry_budget_is_bounded_by_the_settings(
    fake: FakeLLM, config: dict[str, Any], sent: list[int]
) -> None:
    with pytest.raises(JudgeError) as caught:
        await judge(fake, lambda body, n: CUT_TOOL_CALL, max_tokens=300, **config)
    assert caught.value.code == "truncated"
    assert budgets(fake, config.get("token_param", "max_tokens")) == sent


async def test_the_retry_budget_fits_the_context_beside_the_input(fake: FakeLLM) -> None:
    # what the request takes besides the answer, as the input's own budget counts it
    used = estimate_tokens(CONTENT) - input_token_budget(0, 0, final_judge_prompt())
    with pytest.raises(JudgeError):
        await judge(fake, lambda b, n: CUT_TOOL_CALL, max_tokens=300, context_tokens=used + 400)
    assert budgets(fake) == [300, 400]  # not twice: the context has room for 400
    fake.requests.clear()
    with pytest.raises(JudgeError) as caught:  # no room for more: not asked again
        await judge(fake, lambda b, n: CUT_TOOL_CALL, max_tokens=300, context_tokens=used + 300)
    assert caught.value.code == "truncated" and budgets(fake) == [300]


async def test_a_whole_answer_at_the_limit_is_taken_and_a_bad_one_is_still_invalid(
    fake: FakeLLM,
) -> None:
    answer = await judge(fake, lambda body, n: cut(tool_call_reply(ANSWER)), max_tokens=300)
    assert answer.llm_score == 90 and budgets(fake) == [300]  # complete: no retry
    fake.requests.clear()
    with pytest.raises(JudgeError) as caught:  # stopped by itself, not in the schema
        await judge(fake, lambda body, n: content_reply("no idea"), max_tokens=300)
    assert caught.value.code == "invalid_output" and budgets(fake) == [300]


async def test_the_evaluation_says_truncated_and_bills_both_calls(fake: FakeLLM) -> None:
    fake.script = lambda body, n: CUT_TOOL_CALL
    stage = stage_for(fake, llm_max_tokens=256)
    try:
        e = (await stage.judged(job()))[0].evaluation
    finally:
        await stage.aclose()
    assert (e.judge_status, e.judge_error) == ("fallback", "truncated")
    assert e.judge is not None and e.judge.attempts == 2
    assert e.judge.input_tokens == 200 and e.judge.output_tokens == 40  # both billed
    assert budgets(fake) == [256, 512]
