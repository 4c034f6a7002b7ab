"""OpenAI-compatible Chat Completions client for the judge: retries by error class, an overall
deadline, bounded concurrency, a shared rate limit and a circuit breaker.

httpx errors are translated here into JudgeError with one of the documented codes.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from tracejudge.judges.llm.answer import InvalidAnswer, JudgeAnswer, parse_answer
from tracejudge.judges.llm.breaker import CircuitBreaker
from tracejudge.judges.llm.prompt import request_body
from tracejudge.models.errors import TracejudgeError
from tracejudge.prompts import JudgePrompt

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 429})


class JudgeError(TracejudgeError):
    """A judge call that produced no valid answer; `code` is the evaluation's judge_error."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


def _circuit_open() -> JudgeError:
    return JudgeError("circuit_open", "too many consecutive failures; cooling down")


class RateLimiter(Protocol):
    async def acquire(self, deadline: float) -> bool:
        """Wait for a request slot; False when none comes before `deadline` (monotonic)."""


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
    temperature: float = 0.0
    max_tokens: int = 1024
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0


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
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.config = config
        self.prompt = prompt
        self.breaker = breaker
        self.limiter = limiter
        self._semaphore = asyncio.Semaphore(config.concurrency)
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
        """One judged answer for the content, or JudgeError; never waits past the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                async with self._semaphore:
                    # asked when the call would go out, not when it was queued (and again
                    # before each attempt): calls that waited while the calls ahead failed must
                    # not reach a dead server
                    if not self.breaker.allow():
                        raise _circuit_open()
                    answer = await self._attempts(content, deadline)
        except TimeoutError:
            self.breaker.record_failure()
            raise JudgeError("timeout", f"no answer within {self.config.timeout_s:g}s") from None
        except JudgeError as exc:
            if exc.code == "circuit_open":
                raise  # no call was made: nothing to record
            if exc.code == "invalid_output":
                self.breaker.record_success()  # the provider answered; the model did not
            elif exc.code != "budget":
                self.breaker.record_failure()
            raise
        self.breaker.record_success()
        return answer

    async def _attempts(self, content: str, deadline: float) -> JudgeAnswer:
        loop = asyncio.get_running_loop()
        body = request_body(
            content,
            self.prompt,
            self.config.model,
            tool_choice=self.config.tool_choice,
            output_mode=self.config.output_mode,
            schema_strict=self.config.schema_strict,
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
        )
        attempt = 0
        while True:
            attempt += 1
            if self.limiter is not None and not await self.limiter.acquire(deadline):
                raise JudgeError("budget", "rate limit budget exhausted before the deadline")
            if self.breaker.state == "open":  # other calls opened it during a wait or backoff
                raise _circuit_open()
            error, wait = await self._once(body)
            if isinstance(error, JudgeAnswer):
                return error
            retryable = error.code in ("connect", "http_5xx", "rate_limited", "timeout")
            if not retryable or attempt >= self.config.max_attempts:
                raise error
            if wait is None:
                cap = min(
                    self.config.backoff_max_s, self.config.backoff_base_s * 2 ** (attempt - 1)
                )
                wait = cap * random.uniform(0.5, 1.0)
            if loop.time() + wait >= deadline:
                raise error
            log.info("judge call failed (%s), retrying in %.2fs", error.code, wait)
            await asyncio.sleep(wait)

    async def _once(self, body: dict[str, Any]) -> tuple[Any, float | None]:
        """(answer, None) or (JudgeError, suggested wait)."""
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
        if status == 429:
            return JudgeError("rate_limited", "HTTP 429"), retry_after_s(response)
        if status == 408:
            return JudgeError("timeout", "HTTP 408"), retry_after_s(response)
        if status >= 500:
            return JudgeError("http_5xx", f"HTTP {status}"), retry_after_s(response)
        if status >= 400:
            raise JudgeError("http_4xx", f"HTTP {status}: {response.text[:200]}")
        try:
            return parse_answer(response.json()), None
        except ValueError as exc:
            raise JudgeError("invalid_output", "response body is not JSON") from exc
        except InvalidAnswer as exc:
            raise JudgeError("invalid_output", exc.reason) from exc
