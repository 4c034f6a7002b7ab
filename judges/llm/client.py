"""OpenAI-compatible Chat Completions client for the judge: retries by error class, a deadline
from when the call goes out, a bounded wait for a local slot, concurrency that comes down while
the server pushes back, a shared rate limit and a circuit breaker.

httpx errors are translated here into JudgeError with one of the documented codes.
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import json
import logging
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from tracejudge.judges.llm.answer import InvalidAnswer, JudgeAnswer, parse_answer
from tracejudge.judges.llm.breaker import CircuitBreaker
from tracejudge.judges.llm.limit import AdaptiveLimit, TokenReservation
from tracejudge.judges.llm.prompt import (
    estimate_tokens,
    input_token_budget,
    request_body,
    shrink_input,
)
from tracejudge.judges.llm.usage import Tokens, tokens_of
from tracejudge.models.errors import TracejudgeError
from tracejudge.prompts import JudgePrompt

log = logging.getLogger(__name__)

# The server asking to slow down: waited out (Retry-After) and retried under the deadline, the
# calls in flight come down, and the breaker never hears of it: counting them opened the
# breaker under load and turned 320 of 400 requests into rule-only verdicts
PUSHBACK_STATUS = frozenset({429, 503})
# A 4xx that every call would get alike (wrong endpoint, key or model): breaker failures. Other
# 4xx (400, 413, 422: this request's size or content) say nothing about the next request
COUNTED_4XX = frozenset({401, 403, 404})
# Pushbacks waited out per request, beside the deadline: a bound in count as well as in time
MAX_PUSHBACKS = 50
# OpenAI's code and the messages of OpenAI, vLLM ("maximum context length is"), llama.cpp
# ("exceeds the available context size") and others for a prompt longer than the model takes
_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_TEXT = re.compile(
    r"context[ _](length|size|window)|maximum (context )?length|too many tokens", re.IGNORECASE
)


# the prompt of the call in progress in this task, when not the client's own (judge_recorded)
_PROMPT: contextvars.ContextVar[JudgePrompt | None] = contextvars.ContextVar(
    "tracejudge_judge_prompt", default=None
)


@dataclass
class CallRecord:
    """What one judgement took: the attempts sent, the tokens the server reported for them
    (summed: a retried or invalid answer was billed too), the model that answered (the
    response's `model`, which may name a snapshot of the alias asked for), whether the input
    was cut to half for the model's context, and the time from the first attempt out to the
    last reply."""

    attempts: int = 0
    tokens: Tokens | None = None  # None: no reply reported usage
    returned_model: str | None = None
    input_halved: bool = False
    latency_s: float | None = None
    unreported: int = field(default=0, repr=False)  # answered attempts without usage
    # the last pushback's code (rate_limited, http_5xx), None: none: a deadline spent waiting on
    # the server's word is the server's pushback, not a failure for the breaker
    pushed_back: str | None = field(default=None, repr=False)

    def replied(self, body: Any, answered: bool) -> None:
        """A reply's body: its usage added, its model noted."""
        tokens = tokens_of(body)
        if tokens is not None:
            self.tokens = tokens if self.tokens is None else self.tokens + tokens
        elif answered:
            self.unreported += 1
        model = body.get("model") if isinstance(body, dict) else None
        if isinstance(model, str) and model:
            self.returned_model = model[:200]


class JudgeError(TracejudgeError):
    """A judge call that produced no valid answer; `code` is the evaluation's judge_error.
    `counts`: whether it tells the breaker the server is failing (see `_once`). `call`: what
    the judgement took before it failed (set by `LLMClient.judge_recorded`)."""

    def __init__(self, code: str, detail: str = "", *, counts: bool = True) -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail
        self.counts = counts
        self.call: CallRecord | None = None


def _circuit_open() -> JudgeError:
    return JudgeError("circuit_open", "too many consecutive failures; cooling down")


class RateLimiter(Protocol):
    async def acquire(self, deadline: float) -> bool:
        """Wait for a request slot; False when none comes before `deadline` (monotonic)."""


class TokenLimiter(Protocol):
    async def reserve(self, tokens: int, deadline: float) -> TokenReservation | None:
        """Take `tokens` from the per-minute budget, waiting for room; None when none comes
        before `deadline` (monotonic)."""

    async def settle(self, reservation: TokenReservation, spent: int) -> None:
        """Correct a reservation to the tokens the call spent."""


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str
    api_key: str = ""
    timeout_s: float = 60.0
    connect_timeout_s: float = 5.0
    max_attempts: int = 3
    concurrency: int = 4
    tool_choice: str = "named"
    output_mode: str = "tools"  # tools | json_schema (see prompt.request_body)
    schema_strict: bool = True
    temperature: float | None = 0.0  # None: not sent (reasoning models refuse it)
    max_tokens: int = 1024
    # OpenAI's reasoning models (o-series, gpt-5) refuse max_tokens and want
    # max_completion_tokens; most other servers take only max_tokens
    token_param: str = "max_tokens"
    # an answer cut at max_tokens (finish_reason "length": `truncated`) is asked once more
    # with twice the budget, at most this (None: twice; 0: no retry), and at most what
    # context_tokens (None: unknown) leaves beside the input
    retry_max_tokens: int | None = None
    context_tokens: int | None = None
    seed: int | None = 42  # None: not sent
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0
    queue_wait_s: float = 120.0  # the wait for a local slot, before the deadline starts
    retry_after_max_s: float = 30.0  # the longest Retry-After waited as told


def retry_after_s(response: httpx.Response) -> float | None:
    """Retry-After in seconds, from either its delta-seconds or its HTTP-date form."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class LLMClient:
    """One per worker: shares one httpx.AsyncClient across all calls."""

    def __init__(
        self,
        config: LLMConfig,
        prompt: JudgePrompt,
        *,
        breaker: CircuitBreaker,
        limiter: RateLimiter | None = None,
        tokens: TokenLimiter | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.config = config
        self.prompt = prompt
        self.breaker = breaker
        self.limiter = limiter
        self.tokens = tokens
        self.limit = AdaptiveLimit(config.concurrency)
        self._http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s),
            limits=httpx.Limits(max_connections=config.concurrency * 2),
        )
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._headers = {"content-type": "application/json"}
        if config.api_key:
            self._headers["authorization"] = f"Bearer {config.api_key}"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def judge(self, content: str) -> JudgeAnswer:
        """One judged answer for the content, or JudgeError (see `judge_recorded`)."""
        answer, _ = await self.judge_recorded(content)
        return answer

    async def judge_recorded(
        self, content: str, record: CallRecord | None = None, prompt: JudgePrompt | None = None
    ) -> tuple[JudgeAnswer, CallRecord]:
        """One judged answer for the content and what it took (filled into `record` when
        given, whatever the outcome), or JudgeError carrying what it took as `call`. The wait
        for a local slot (and the first rate-limit permit) is bounded by `queue_wait_s`; the
        deadline, `timeout_s`, starts when the call goes out: time queued behind other calls
        is not the server's."""
        record = CallRecord() if record is None else record
        # `prompt`: this call's (an agent's criteria added); every body of the call is made
        # with it, retries and smaller inputs too, and no other task sees it
        token = _PROMPT.set(prompt)
        try:
            answer = await self._judge(content, record)
            return answer.asked((prompt or self.prompt).dimensions), record
        except JudgeError as exc:
            exc.call = record
            raise
        finally:
            _PROMPT.reset(token)

    async def _judge(self, content: str, record: CallRecord) -> JudgeAnswer:
        loop = asyncio.get_running_loop()
        queued_until = loop.time() + self.config.queue_wait_s
        try:
            async with asyncio.timeout_at(queued_until):
                await self.limit.acquire()
        except TimeoutError:
            raise JudgeError(
                "timeout",
                f"queued locally {self.config.queue_wait_s:g}s without a free call slot",
                counts=False,
            ) from None
        admitted = None
        try:
            # asked when the call would go out, not when it was queued (and again before each
            # attempt): calls that waited while the calls ahead failed must not reach a dead
            # server
            admitted = self.breaker.admit()
            if admitted is None:
                raise _circuit_open()
            if self.limiter is not None and not await self.limiter.acquire(queued_until):
                raise JudgeError("budget", "no rate limit slot within the queue wait", counts=False)
            body = self._body(content)
            reservation = await self._reserve(body, queued_until)
            if self.tokens is not None and reservation is None:
                raise JudgeError(
                    "budget", "no tokens-per-minute room within the queue wait", counts=False
                )
            return await self._judged(content, body, reservation, record)
        finally:
            if admitted == "probe":
                # whatever ended it (cancelled, an error that says nothing about the server,
                # our own bug): a probe left open keeps the breaker half-open until restart.
                # After record_success/record_failure this changes nothing
                self.breaker.release_probe()
            self.limit.release()

    async def _judged(
        self,
        content: str,
        body: dict[str, Any],
        reservation: TokenReservation | None,
        record: CallRecord,
    ) -> JudgeAnswer:
        """The call under its deadline, its outcome told to the breaker."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.config.timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                answer = await self._attempts(content, body, reservation, deadline, record)
        except TimeoutError:
            if record.pushed_back is not None:  # the server asked to wait, up to the deadline
                raise JudgeError(
                    record.pushed_back,
                    f"pushed back until the deadline ({self.config.timeout_s:g}s)",
                    counts=False,
                ) from None
            self.breaker.record_failure()
            raise JudgeError("timeout", f"no answer within {self.config.timeout_s:g}s") from None
        except JudgeError as exc:
            if exc.code in ("invalid_output", "truncated"):
                self.breaker.record_success()  # the provider answered; the model did not
            elif exc.counts:
                self.breaker.record_failure()
            raise
        finally:
            record.latency_s = loop.time() - started
        self.breaker.record_success()
        return answer

    def _body(self, content: str, max_tokens: int | None = None) -> dict[str, Any]:
        return request_body(
            content,
            _PROMPT.get() or self.prompt,
            self.config.model,
            tool_choice=self.config.tool_choice,
            output_mode=self.config.output_mode,
            schema_strict=self.config.schema_strict,
            temperature=self.config.temperature,
            max_tokens=max_tokens or self.config.max_tokens,
            token_param=self.config.token_param,
            seed=self.config.seed,
        )

    def _backoff(self, n: int) -> float:
        cap = min(self.config.backoff_max_s, self.config.backoff_base_s * 2.0 ** (n - 1))
        return float(cap * random.uniform(0.5, 1.0))

    async def _reserve(self, body: dict[str, Any], deadline: float) -> TokenReservation | None:
        """The attempt's tokens taken from the per-minute token budget: the request's input
        as estimated (erring high) plus the whole answer's reserve, until `settle` corrects
        it to what the server reported."""
        if self.tokens is None:
            return None
        sent = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        answer = int(body.get(self.config.token_param) or self.config.max_tokens)
        return await self.tokens.reserve(estimate_tokens(sent) + answer, deadline)

    def _larger_budget(self, content: str, asked: int) -> int | None:
        """The output budget of the one retry of an answer cut at `asked` tokens: twice it,
        within `retry_max_tokens` and what the context leaves beside this input (estimated
        to err high, as the input's own budget is); None when that is no larger."""
        larger = 2 * asked
        if self.config.retry_max_tokens is not None:
            larger = min(larger, self.config.retry_max_tokens)
        if self.config.context_tokens:
            room = input_token_budget(self.config.context_tokens, 0, self.prompt)
            larger = min(larger, room - estimate_tokens(content))
        return larger if larger > asked else None

    async def _attempts(
        self,
        content: str,
        body: dict[str, Any],
        reservation: TokenReservation | None,
        deadline: float,
        record: CallRecord,
    ) -> JudgeAnswer:
        loop = asyncio.get_running_loop()
        failures = pushbacks = 0
        shrunk = enlarged = False
        budget = self.config.max_tokens  # the answer's tokens, as sent
        first = True
        while True:
            # the first call's permits were taken before the deadline started (`judge`)
            if not first and self.limiter is not None and not await self.limiter.acquire(deadline):
                raise JudgeError(
                    "budget", "rate limit budget exhausted before the deadline", counts=False
                )
            if not first:
                reservation = await self._reserve(body, deadline)
                if self.tokens is not None and reservation is None:
                    raise JudgeError(
                        "budget", "tokens-per-minute budget spent before the deadline", counts=False
                    )
            first = False
            if self.breaker.state == "open":  # other calls opened it during a wait or backoff
                raise _circuit_open()
            result, wait = await self._settled(body, record, reservation)
            if isinstance(result, JudgeAnswer):
                self.limit.on_success()
                return result
            error = result
            if error.code == "context_length" and not shrunk:
                # once, at half its size: a cheaper retry than a lost verdict
                shrunk = True
                smaller = shrink_input(content, len(content) // 2)
                if smaller is not None and len(smaller) < len(content):
                    log.info("judge input over the model's context: retrying at half its size")
                    record.input_halved = True
                    content, body = smaller, self._body(smaller, budget)
                    continue
            if error.code == "context_length":
                raise JudgeError("http_4xx", error.detail, counts=False)
            if error.code == "truncated":
                # cut at its token limit: once more with a larger budget, else given up
                larger = None if enlarged else self._larger_budget(content, budget)
                if larger is None:
                    raise error
                log.info("judge answer cut at %d tokens: retrying with %d", budget, larger)
                enlarged, budget = True, larger
                body = self._body(content, budget)
                continue
            if error.code == "pushback":
                self.limit.on_pushback()
                pushbacks += 1
                error = JudgeError(
                    "rate_limited" if error.detail.startswith("HTTP 429") else "http_5xx",
                    error.detail,
                    counts=False,
                )
                record.pushed_back = error.code
                if pushbacks >= MAX_PUSHBACKS:
                    raise error
                wait = min(
                    self._backoff(pushbacks) if wait is None else wait,
                    self.config.retry_after_max_s,
                )
            else:
                failures += 1
                retryable = error.code in ("connect", "http_5xx", "timeout")
                if not retryable or failures >= self.config.max_attempts:
                    raise error
                if wait is None:
                    wait = self._backoff(failures)
            if loop.time() + wait >= deadline:
                raise error
            log.info("judge call failed (%s), retrying in %.2fs", error.code, wait)
            await asyncio.sleep(wait)

    async def _settled(
        self, body: dict[str, Any], record: CallRecord, reservation: TokenReservation | None
    ) -> tuple[JudgeAnswer | JudgeError, float | None]:
        """`_once`, its token reservation corrected to what the attempt spent: the usage its
        reply reported; nothing for a reply that is an error without usage (a 429, a 5xx, a
        refused connection: not billed); the estimate kept where it is unknown (an answer
        without usage, a read timeout, a cancelled call)."""
        if reservation is None or self.tokens is None:
            return await self._once(body, record)
        before, unreported = _billed(record.tokens), record.unreported
        try:
            result, wait = await self._once(body, record)
        except JudgeError:
            if _billed(record.tokens) != before:
                await self.tokens.settle(reservation, _billed(record.tokens) - before)
            raise
        if _billed(record.tokens) != before:
            await self.tokens.settle(reservation, _billed(record.tokens) - before)
        elif record.unreported == unreported and not isinstance(result, JudgeAnswer):
            await self.tokens.settle(reservation, 0)
        return result, wait

    async def _once(
        self, body: dict[str, Any], record: CallRecord
    ) -> tuple[JudgeAnswer | JudgeError, float | None]:
        """(answer, None) or (JudgeError, suggested wait); the codes `pushback` and
        `context_length` are the retry loop's own, never a judge_error. An answer that is
        not one and was cut at its token limit (finish_reason "length") is `truncated`, for
        the loop to retry with a larger budget. Every reply's usage goes into `record`, an
        error's too when it reports any."""
        record.attempts += 1
        try:
            response = await self._http.post(self._url, json=body, headers=self._headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            return JudgeError("connect", type(exc).__name__), None
        except httpx.TimeoutException as exc:
            # a read timeout is not retried: the next attempt would wait just as long
            raise JudgeError("timeout", type(exc).__name__) from exc
        except httpx.HTTPError as exc:
            return JudgeError("connect", type(exc).__name__), None
        status = response.status_code
        if status >= 400:
            record.replied(_json_or_none(response), answered=False)
        if status in PUSHBACK_STATUS:
            return JudgeError("pushback", f"HTTP {status}"), retry_after_s(response)
        if status == 408:
            return JudgeError("timeout", "HTTP 408"), retry_after_s(response)
        if status >= 500:
            return JudgeError("http_5xx", f"HTTP {status}"), retry_after_s(response)
        if status >= 400:
            detail = f"HTTP {status}: {response.text[:200]}"
            if status == 400 and _context_exceeded(response):
                return JudgeError("context_length", detail, counts=False), None
            raise JudgeError("http_4xx", detail, counts=status in COUNTED_4XX)
        try:
            reply = response.json()
        except ValueError as exc:
            raise JudgeError("invalid_output", "response body is not JSON") from exc
        record.replied(reply, answered=True)
        try:
            return parse_answer(reply), None
        except (InvalidAnswer, ValueError) as exc:  # ValueError: not readable at all
            reason = exc.reason if isinstance(exc, InvalidAnswer) else "answer not readable"
            if _cut(reply):
                # a tool call or JSON object left unclosed, or no answer yet at all (a
                # reasoning model's hidden reasoning spent the budget): not the model's fault
                # alone, and a larger budget may get the answer
                detail = f"answer cut at its token limit (finish_reason length): {reason}"
                return JudgeError("truncated", detail, counts=False), None
            raise JudgeError("invalid_output", reason) from exc


def _cut(reply: Any) -> bool:
    """The answer stopped at its token limit: OpenAI's (and vLLM's, llama.cpp's, Ollama's)
    `finish_reason: "length"` on the first choice."""
    try:
        return bool(reply["choices"][0]["finish_reason"] == "length")
    except (KeyError, IndexError, TypeError):
        return False


def _billed(tokens: Tokens | None) -> int:
    return 0 if tokens is None else tokens.input + tokens.output


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _context_exceeded(response: httpx.Response) -> bool:
    """A 400 saying the prompt is longer than the model's context."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        if error.get("code") in _CONTEXT_CODES or error.get("type") in _CONTEXT_CODES:
            return True
        return bool(_CONTEXT_TEXT.search(str(error.get("message", ""))))
    return bool(_CONTEXT_TEXT.search(response.text[:2000]))
