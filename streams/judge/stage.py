"""The judge stage: closed requests in, blended verdicts out, never stalling the windows."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis.asyncio as aioredis

from tracejudge.judges.llm.breaker import CircuitBreaker
from tracejudge.judges.llm.client import CallRecord, JudgeError, LLMClient, LLMConfig
from tracejudge.judges.llm.criteria import with_criteria
from tracejudge.judges.llm.monitor import FallbackMonitor
from tracejudge.judges.llm.prompt import cache_key
from tracejudge.judges.llm.usage import Prices
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.verdict.conclude import (
    JudgeJob,
    JudgeOutcome,
    Policy,
    Verdict,
    conclude,
    evaluator_version,
)
from tracejudge.models.outputs import Alert, JudgeCall
from tracejudge.prompts import JudgePrompt, final_judge_prompt
from tracejudge.settings import Settings
from tracejudge.streams.judge.budget import BudgetLimits, SpendBudget
from tracejudge.streams.judge.cache import JudgeCache
from tracejudge.streams.judge.rate_limit import SharedRateLimiter, SharedTokenLimiter

log = logging.getLogger(__name__)

# Jobs taken from Kafka beyond the calls the client may have out now (`JudgeStage.room`): a
# cache hit or a budget skip finishes without a call slot, and a job spends a moment before its
# call (the cache lookup) and after it (publishing), so a couple more keep the call slots busy.
# Only these few wait locally for a slot, far within TRACEJUDGE_LLM_QUEUE_WAIT_S; the rest wait
# in Kafka, counted as the judge queue's lag, instead of timing out in a local queue
JOB_HEADROOM = 2


def judge_version(settings: Settings, prompt: JudgePrompt) -> str:
    return f"judge-{prompt.version}:{settings.llm_model}"


def prices_of(settings: Settings) -> Prices | None:
    if settings.llm_price_input_per_mtok is None or settings.llm_price_output_per_mtok is None:
        return None
    return Prices(
        settings.llm_price_input_per_mtok,
        settings.llm_price_output_per_mtok,
        settings.llm_price_cached_input_per_mtok,
    )


def budget_limits(settings: Settings) -> BudgetLimits:
    return BudgetLimits(
        tokens_per_minute=settings.llm_budget_tokens_per_minute,
        tokens_per_day=settings.llm_budget_tokens_per_day,
        usd_per_minute=settings.llm_budget_usd_per_minute,
        usd_per_day=settings.llm_budget_usd_per_day,
    )


def judging_version(settings: Settings) -> str:
    """The evaluator version every verdict carries: the rules', and the judge's when it is on.
    The worker and `tracejudge judge` compute it from the same settings."""
    if not settings.llm_judge_enabled:
        return evaluator_version(RuleJudge.version)
    return evaluator_version(RuleJudge.version, judge_version(settings, final_judge_prompt()))


class JudgeStage:
    def __init__(
        self,
        settings: Settings,
        redis: aioredis.Redis | None,
        policy: Policy,
        version: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.clock = clock  # the closer's: a job's age is measured from its closed_at
        self.policy = policy
        self.version = version
        self.prompt = final_judge_prompt()
        self.criteria = settings.criteria_book()  # a team's own, per agent
        self.limiter = SharedRateLimiter(redis, settings.llm_rpm)
        self.tokens = SharedTokenLimiter(redis, settings.llm_tpm)
        self.cache = JudgeCache(redis, settings.llm_cache_ttl_s)
        self.prices = prices_of(settings)
        self.budget = SpendBudget(redis, budget_limits(settings))
        self._unreported_warned = False
        self.breaker = CircuitBreaker(
            settings.llm_breaker_failures, settings.llm_breaker_cooldown_s
        )
        self.monitor = FallbackMonitor(
            settings.llm_alert_window_s,
            settings.llm_alert_fallback_rate,
            settings.llm_alert_min_requests,
        )
        self.client = LLMClient(
            LLMConfig(
                base_url=settings.llm_base_url,
                model=settings.llm_model,
                api_key=settings.llm_api_key.get_secret_value(),
                timeout_s=settings.llm_timeout_s,
                connect_timeout_s=settings.llm_connect_timeout_s,
                max_attempts=settings.llm_max_attempts,
                concurrency=settings.llm_concurrency,
                tool_choice=settings.llm_tool_choice,
                output_mode=settings.llm_output_mode,
                schema_strict=settings.llm_schema_strict,
                temperature=settings.llm_temperature,
                max_tokens=settings.llm_max_tokens,
                token_param=settings.llm_token_param,
                retry_max_tokens=settings.llm_retry_max_tokens,
                context_tokens=settings.llm_context_tokens,
                seed=settings.llm_seed,
                queue_wait_s=settings.llm_queue_wait_s,
                retry_after_max_s=settings.llm_retry_after_max_s,
            ),
            self.prompt,
            breaker=self.breaker,
            limiter=self.limiter,
            tokens=self.tokens if settings.llm_tpm else None,
        )

    def room(self, unfinished: int) -> int:
        """How many more judge jobs may be taken now, with `unfinished` taken and not finished:
        the call slots the adaptive limit allows now (fewer while the server pushes back)
        plus JOB_HEADROOM (`consumer.JudgeRunner`)."""
        return self.client.limit.slots + JOB_HEADROOM - unfinished

    async def outcome(self, job: JudgeJob) -> JudgeOutcome:
        prompt = with_criteria(self.prompt, self.criteria.for_agent(job.facts.agent_name))
        key = cache_key(job.content, prompt, self.settings.llm_model)
        cached = await self.cache.get(key)
        if cached is not None:  # costs nothing: served past a spent budget too
            call = self._provenance(CallRecord(), job, cached=True)
            return JudgeOutcome("ok", answer=cached, cached=True, call=call)
        waited = self.clock() - job.closed_at
        if waited > self.settings.llm_job_max_age_s:
            # the backlog is bounded in age, not in count: a verdict this late helps nobody,
            # and the rules' one went out at close; a costless cache answer is still taken
            note = (
                f"not judged: waited {waited:.0f}s in the judge queue "
                f"(TRACEJUDGE_LLM_JOB_MAX_AGE_S {self.settings.llm_job_max_age_s:g}s)"
            )
            return JudgeOutcome("skipped", note=note, expired=True)
        spent = await self.budget.spent()
        if spent is not None:
            return JudgeOutcome("skipped", note=spent.note, budget_spent=spent.period)
        started = time.monotonic()
        record = CallRecord()
        try:
            answer, _ = await self.client.judge_recorded(job.content, record, prompt)
        except JudgeError as exc:
            log.info("judge fallback for %s: %s", job.facts.request_id, exc.code)
            error = exc.code
        except Exception:
            log.exception("unexpected judge failure for %s", job.facts.request_id)
            error = "internal"
        else:
            call = await self._charged(record, job)
            await self.cache.put(key, answer)
            return JudgeOutcome(
                "ok", answer=answer, latency_s=time.monotonic() - started, call=call
            )
        return JudgeOutcome(
            "fallback",
            error=error,  # type: ignore[arg-type]
            latency_s=time.monotonic() - started,
            call=await self._charged(record, job),
        )

    async def _charged(self, record: CallRecord, job: JudgeJob) -> JudgeCall:
        """The call's provenance, its tokens and cost charged to the budget."""
        call = self._provenance(record, job, cached=False)
        tokens = (call.input_tokens or 0) + (call.output_tokens or 0)
        await self.budget.charge(tokens, call.cost_usd)
        if record.unreported and not self._unreported_warned:
            # a cap counts what the server reports: one that reports nothing is never capped
            self._unreported_warned = True
            log.warning(
                "the judge's server answered without `usage`: no tokens, cost or budget "
                "can be counted for such answers"
            )
        return call

    def _provenance(self, record: CallRecord, job: JudgeJob, *, cached: bool) -> JudgeCall:
        tokens = record.tokens
        criteria = self.criteria.for_agent(job.facts.agent_name)
        return JudgeCall(
            requested_model=self.settings.llm_model,
            returned_model=record.returned_model,
            prompt_version=with_criteria(self.prompt, criteria).version,
            criteria_version=None if criteria is None else criteria.version,
            cached=cached,
            attempts=record.attempts,
            latency_s=record.latency_s,
            input_tokens=None if tokens is None else tokens.input,
            output_tokens=None if tokens is None else tokens.output,
            cached_input_tokens=None if tokens is None else tokens.cached_input,
            cost_usd=None if tokens is None or self.prices is None else self.prices.cost(tokens),
            steps_omitted=job.steps_omitted,
            input_left_out=job.left_out,
            input_halved=record.input_halved,
        )

    async def judged(self, job: JudgeJob) -> tuple[Verdict, JudgeOutcome]:
        """The verdict and how the judge call went, for the caller to record
        (`judge/jobs.py`)."""
        outcome = await self.outcome(job)
        now = time.time()
        verdict = conclude(job.facts, job.rules, outcome, self.policy, self.version, now)
        # only calls tried count: a request not sent (a spent budget, a job past its age) is
        # the operator's choice or the backlog's, each with its own counter, not the model down
        tried = outcome.status in ("ok", "fallback")
        if tried and self.monitor.record(outcome.status == "ok", time.monotonic()):
            evaluation = verdict.evaluation
            verdict.alerts.append(
                Alert.of(
                    "judge_unavailable",
                    evaluation.evaluation_id,
                    "critical",
                    f"LLM judge fell back to rules for {self.monitor.rate():.0%} of requests "
                    f"in the last {self.settings.llm_alert_window_s:g}s "
                    f"(latest: {outcome.error}); verdicts are rule-only meanwhile",
                    now,
                    request_id=evaluation.request_id,
                    evaluation_id=evaluation.evaluation_id,
                )
            )
        return verdict, outcome

    async def aclose(self) -> None:
        await self.client.aclose()
