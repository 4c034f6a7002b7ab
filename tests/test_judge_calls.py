"""How judge calls fail, wait and recover, through the real client against a loopback server:
which failures count against the breaker, pushback (429/503), the deadline, a context-length
400, the probe, and the request parameters today's models take."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fake_llm import FakeLLM, Reply, data_block, tool_call_reply, verdict
from tests.test_llm_judge import client_for
from tests.test_rules import GOOD, trace, window_of
from tracejudge.judges.llm.breaker import CircuitBreaker
from tracejudge.judges.llm.client import JudgeError
from tracejudge.judges.llm.prompt import build_input
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.settings import Settings
from tracejudge.streams.judge.stage import JudgeStage

OK = tool_call_reply(verdict(True, False))


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


async def call(fake: FakeLLM, script: Any, content: str = "x", **overrides: Any) -> Any:
    """One judge call; the answer or the JudgeError."""
    fake.script = script
    client = client_for(fake.base_url, **overrides)
    try:
        return await client.judge(content)
    except JudgeError as exc:
        return exc
    finally:
        await client.aclose()


# -- the breaker recovers -------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["1e999", "-1e999", "NaN", "Infinity"])
async def test_a_non_finite_score_is_an_invalid_answer(fake: FakeLLM, raw: str) -> None:
    args = json.dumps(verdict(True, False)).replace('"correctness": 80', f'"correctness": {raw}')
    result = await call(fake, lambda body, n: tool_call_reply(args))
    assert isinstance(result, JudgeError) and result.code == "invalid_output", result


async def test_the_breaker_closes_again_after_a_probe_that_raised(fake: FakeLLM) -> None:
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=10, clock=lambda: now[0])
    overflow = json.dumps(verdict(True, False)).replace('"relevance": 80', '"relevance": 1e999')
    replies = iter([Reply(status=500, body={}), tool_call_reply(overflow), OK])
    fake.script = lambda body, n: next(replies)
    client = client_for(fake.base_url, max_attempts=1, breaker=breaker)
    try:
        with pytest.raises(JudgeError):
            await client.judge("x")
        assert breaker.state == "open"
        now[0] = 11.0  # the probe goes out and gets an answer that once raised OverflowError
        with pytest.raises(JudgeError):
            await client.judge("x")
        assert (await client.judge("x")).success  # not stuck half-open: the next call goes out
        assert str(breaker.state) == "closed" and fake.count() == 3  # str(): mypy narrowed it
    finally:
        await client.aclose()


async def test_a_cancelled_probe_is_released(fake: FakeLLM) -> None:
    # a probe cancelled mid-call (a rebalance or shutdown cancels judge jobs) must not leave
    # the breaker waiting for its outcome for ever
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=10, clock=lambda: now[0])
    replies = iter([Reply(status=500, body={}), Reply(body={}, delay_s=5), OK])
    fake.script = lambda body, n: next(replies)
    client = client_for(fake.base_url, max_attempts=1, breaker=breaker)
    try:
        with pytest.raises(JudgeError):
            await client.judge("x")
        now[0] = 11.0
        probe = asyncio.create_task(client.judge("x"))
        for _ in range(100):  # until the probe's call reached the server (at most 2 s)
            if fake.count() == 2:
                break
            await asyncio.sleep(0.02)
        probe.cancel()
        with pytest.raises(asyncio.CancelledError):
            await probe
        assert (await client.judge("x")).success
        assert breaker.state == "closed"
    finally:
        await client.aclose()


# -- which failures count against the breaker ------------------------------------------------

CONTEXT_400 = Reply(
    status=400,
    body={
        "error": {
            "message": "This model's maximum context length is 8192 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    },
)


@pytest.mark.parametrize(
    ("reply", "counts"),
    [
        (Reply(status=400, body={"error": {"message": "bad tool schema"}}), False),
        (CONTEXT_400, False),
        (Reply(status=413, body={"error": {"message": "payload too large"}}), False),
        (Reply(status=422, body={"error": {"message": "unprocessable"}}), False),
        (Reply(status=401, body={"error": {"message": "bad key"}}), True),
        (Reply(status=403, body={"error": {"message": "forbidden"}}), True),
        (Reply(status=404, body={"error": {"message": "no such model"}}), True),
    ],
    ids=["400", "400-context", "413", "422", "401", "403", "404"],
)
async def test_only_errors_that_hold_for_every_request_count_against_the_breaker(
    fake: FakeLLM, reply: Reply, counts: bool
) -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=30)
    result = await call(fake, lambda body, n: reply, breaker=breaker, max_attempts=1)
    assert isinstance(result, JudgeError) and result.code == "http_4xx"
    assert breaker.state == ("open" if counts else "closed")


@pytest.mark.parametrize("status", [429, 503])
async def test_pushback_is_waited_out_and_never_opens_the_breaker(
    fake: FakeLLM, status: int
) -> None:
    # more pushbacks than attempts: waiting on the server's word is not a failed attempt
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=30)
    slow_down = Reply(status=status, body={}, headers={"Retry-After": "0.1"})
    started = time.monotonic()
    result = await call(
        fake, lambda body, n: slow_down if n <= 4 else OK, breaker=breaker, max_attempts=2
    )
    assert not isinstance(result, JudgeError), result
    assert result.success and fake.count() == 5 and breaker.state == "closed"
    assert time.monotonic() - started >= 0.4  # it waited as told between the calls


@pytest.mark.parametrize("status", [429, 503])
async def test_a_deadline_spent_after_pushback_is_the_servers_pushback_not_a_failure(
    fake: FakeLLM, status: int
) -> None:
    """The server asks to wait, and the call after the wait is still running when the deadline
    comes (a busy server, or a busy box): the deadline went on the server's word, so the
    answer is its pushback, and the breaker does not count it."""
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=30)
    slow_down = Reply(status=status, body={}, headers={"Retry-After": "0.2"})
    late = Reply(status=status, body={}, delay_s=3.0)
    result = await call(
        fake, lambda body, n: slow_down if n == 1 else late, breaker=breaker, timeout_s=1.0
    )
    assert isinstance(result, JudgeError)
    assert result.code == ("rate_limited" if status == 429 else "http_5xx"), result
    assert breaker.state == "closed"


@pytest.mark.parametrize("status", [429, 503])
async def test_pushback_until_the_deadline_is_not_a_breaker_failure(
    fake: FakeLLM, status: int
) -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=30)
    slow_down = Reply(status=status, body={}, headers={"Retry-After": "0.2"})
    started = time.monotonic()
    result = await call(fake, lambda body, n: slow_down, breaker=breaker, timeout_s=1.0)
    assert isinstance(result, JudgeError) and result.code in ("rate_limited", "http_5xx")
    assert breaker.state == "closed"
    assert time.monotonic() - started < 1.5 and 2 <= fake.count() <= 6


async def test_retry_after_as_a_date_and_bounded_by_the_max_wait(fake: FakeLLM) -> None:
    # an HTTP date 1-2 s ahead is honoured; one an hour ahead is cut to the max wait
    soon = email.utils.formatdate(time.time() + 2, usegmt=True)
    replies = iter([Reply(status=429, body={}, headers={"Retry-After": soon}), OK])
    started = time.monotonic()
    result = await call(fake, lambda body, n: next(replies))
    assert result.success and 0.9 <= time.monotonic() - started < 3.5
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    replies = iter([Reply(status=429, body={}, headers={"Retry-After": later}), OK])
    started = time.monotonic()
    result = await call(fake, lambda body, n: next(replies), retry_after_max_s=0.3)
    assert result.success and time.monotonic() - started < 1.5


async def test_calls_in_flight_come_down_while_the_server_pushes_back(fake: FakeLLM) -> None:
    # the server takes 2 at a time and answers 429 to the rest; 8 allowed locally, 24 calls.
    # Every call ends judged, and the client comes down towards what the server takes instead
    # of hammering it with 8 (a fixed limit of 8 drew about 116 rejections, this one about 38)
    rejected = [0]

    def script(body: dict[str, Any], n: int) -> Reply:
        if fake.in_flight > 2:
            rejected[0] += 1
            return Reply(status=429, body={}, headers={"Retry-After": "0.05"})
        return tool_call_reply(verdict(True, False), delay_s=0.1)

    fake.script = script
    client = client_for(fake.base_url, concurrency=8, timeout_s=10.0)
    try:
        results = await asyncio.gather(*(client.judge("x") for _ in range(24)))
        assert all(r.success for r in results)
        assert client.limit.current < 8
    finally:
        await client.aclose()
    assert rejected[0] < 70, rejected[0]


# -- the deadline counts from when the call goes out -----------------------------------------


async def test_the_deadline_starts_when_the_call_goes_out(fake: FakeLLM) -> None:
    # latency at 0.6 of the timeout, one call at a time, three asked at once: the third waits
    # 1.2 s for its slot, yet each call gets its whole timeout once it goes out
    fake.script = lambda body, n: tool_call_reply(verdict(True, False), delay_s=0.6)
    client = client_for(fake.base_url, concurrency=1, timeout_s=1.0, queue_wait_s=5.0)
    try:
        results = await asyncio.gather(*(client.judge("x") for _ in range(3)))
    finally:
        await client.aclose()
    assert all(r.success for r in results) and fake.max_in_flight == 1


async def test_the_wait_for_a_slot_has_its_own_bound(fake: FakeLLM) -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=30)
    fake.script = lambda body, n: tool_call_reply(verdict(True, False), delay_s=1.0)
    client = client_for(
        fake.base_url, concurrency=1, timeout_s=5.0, queue_wait_s=0.3, breaker=breaker
    )
    try:
        started = time.monotonic()
        first, second = await asyncio.gather(
            client.judge("x"), client.judge("x"), return_exceptions=True
        )
    finally:
        await client.aclose()
    assert not isinstance(first, BaseException) and first.success
    assert isinstance(second, JudgeError) and second.code == "timeout"
    assert "queue" in second.detail and fake.count() == 1
    assert breaker.state == "closed"  # the server did nothing wrong
    assert time.monotonic() - started < 2.0


# -- a context-length 400 is retried once at half the budget ---------------------------------


async def test_a_context_length_400_is_retried_once_at_half_the_budget(fake: FakeLLM) -> None:
    events = trace(GOOD, [(f"tool{i}", i % 3 != 0) for i in range(40)])
    for e in events[1:-1]:
        e["result_preview"] = "output line " * 100
    content = build_input(window_of(events), 24_000).content
    assert len(content) > 20_000

    def script(body: dict[str, Any], n: int) -> Reply:
        return CONTEXT_400 if len(body["messages"][1]["content"]) > 12_000 else OK

    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=30)
    result = await call(fake, script, content=content, breaker=breaker, max_attempts=1)
    assert not isinstance(result, JudgeError), result
    assert result.success and fake.count() == 2 and breaker.state == "closed"
    shorter = fake.requests[1]["messages"][1]["content"]
    assert len(shorter) <= len(content) // 2
    data = json.loads(data_block(fake.requests[1]))  # still one valid JSON document
    assert data["request_id"] == "r" and "omitted" in data["note"]
    # the second cut is the last: a context that is still too long is a failed request
    result = await call(fake, lambda body, n: CONTEXT_400, content=content, breaker=breaker)
    assert isinstance(result, JudgeError) and result.code == "http_4xx"
    assert fake.count() == 4 and breaker.state == "closed"


# -- request parameters for today's models ---------------------------------------------------


def stage_for(fake: FakeLLM, **env: Any) -> JudgeStage:
    settings = Settings(llm_base_url=fake.base_url, llm_model="m", **env)
    return JudgeStage(settings, None, Policy(), "v")


@pytest.mark.parametrize(
    ("env", "expected", "absent"),
    [
        ({}, {"max_tokens": 1024, "temperature": 0.0, "seed": 42}, {"max_completion_tokens"}),
        (
            {
                "llm_token_param": "max_completion_tokens",
                "llm_temperature": "unset",
                "llm_seed": "unset",
            },
            {"max_completion_tokens": 1024},
            {"max_tokens", "temperature", "seed"},
        ),
        ({"llm_temperature": "0.3", "llm_seed": "7"}, {"temperature": 0.3, "seed": 7}, set()),
    ],
    ids=["default", "reasoning-model", "set"],
)
async def test_the_request_parameters_follow_the_settings(
    fake: FakeLLM, env: dict[str, Any], expected: dict[str, Any], absent: set[str]
) -> None:
    stage = stage_for(fake, **env)
    try:
        assert (await stage.client.judge("x")).success
    finally:
        await stage.aclose()
    [body] = fake.requests
    assert {k: body.get(k) for k in expected} == expected
    assert not absent & body.keys()


def test_the_request_parameter_settings_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="llm_token_param"):
        Settings(llm_token_param="max_output_tokens")
    with pytest.raises(ValueError, match="llm_temperature"):
        Settings(llm_temperature="warm")
