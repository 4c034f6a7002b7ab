"""The LLM judge's settings: its endpoint, model, sampling, budget and prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)

from tracejudge.judges.llm.client import LLMConfig
from tracejudge.judges.llm.criteria import CriteriaBook
from tracejudge.judges.llm.prompt import input_token_budget
from tracejudge.judges.llm.sampling import parse_rates

# Defaults of the judges' own settings are theirs: written there once, read here.
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.prompts import final_judge_prompt
from tracejudge.settings.problems import MIN_INPUT_TOKENS, PREFIX, SettingProblem


class JudgeSettings(BaseModel):
    """The LLM judge: the endpoint, how it is asked, and how it runs unattended."""

    rule_weight: float = Field(
        Policy.rule_weight,
        ge=0,
        le=1,
        description="Weight w of the rule score: overall = w*rule + (1-w)*llm.",
    )
    # None only until `Settings` reads it: its validator derives the default from the
    # endpoint settings, so the documented default is "unset", never a false `false`
    llm_judge_enabled: bool | None = Field(
        None,
        description="Judge closed requests with an LLM: true or false. Unset: on as soon as a "
        "judge endpoint is configured (TRACEJUDGE_LLM_BASE_URL or TRACEJUDGE_LLM_API_KEY set), "
        "off otherwise.",
    )
    worker_judges: bool = Field(
        True,
        description="With the LLM judge on, the worker also consumes the judge-requests topic and "
        "makes the judge calls. Set false where `tracejudge judge` processes do it, scaled on "
        "their own.",
    )
    llm_base_url: str = Field(
        "https://api.openai.com/v1", description="OpenAI-compatible API base URL (…/v1)."
    )
    llm_model: str = Field("gpt-4o-mini", description="Model name sent to the API.")
    llm_api_key: SecretStr = Field(
        SecretStr(""), description="API key (secret; never logged). Empty: no auth header."
    )
    llm_timeout_s: float = Field(
        LLMConfig.timeout_s, gt=0, description="Overall deadline per judged request."
    )
    llm_connect_timeout_s: float = Field(
        LLMConfig.connect_timeout_s, gt=0, description="TCP connect timeout."
    )
    llm_max_attempts: int = Field(
        LLMConfig.max_attempts,
        ge=1,
        description="Attempts per request (retries + 1); waits on a 429 or 503 use none.",
    )
    llm_concurrency: int = Field(
        LLMConfig.concurrency,
        ge=1,
        description="Most judge calls in flight per worker; fewer while the server answers "
        "429 or 503, back up as it answers again.",
    )
    llm_rpm: int = Field(
        0, ge=0, description="Requests per minute shared by all workers via Redis; 0: no limit."
    )
    llm_tpm: int = Field(
        0,
        ge=0,
        description="Judge tokens per minute shared by all workers via Redis, as "
        "TRACEJUDGE_LLM_RPM: a call reserves its estimated input plus TRACEJUDGE_LLM_MAX_TOKENS "
        "before it goes out, corrected to the usage the server reports; a call finding the "
        "minute spent waits for the next (within TRACEJUDGE_LLM_QUEUE_WAIT_S). 0: no limit.",
    )
    llm_criteria_file: str = Field(
        "",
        description="A TOML file of a team's own criteria for the LLM judge: [default] and "
        '[agents."NAME"] tables of criteria, version, good_example, bad_example '
        "(judges/llm/criteria.py), given to the judge as the operator's instructions and named "
        "in the evaluation's judge provenance; checked at start.",
    )
    _criteria_book: CriteriaBook = PrivateAttr(default_factory=CriteriaBook)

    @model_validator(mode="after")
    def _criteria_readable(self) -> Self:
        # read once, at start: a bad criteria file stops every command naming what is wrong
        try:
            path = self.llm_criteria_file
            self._criteria_book = CriteriaBook.read(Path(path)) if path else CriteriaBook()
        except ValueError as exc:
            raise SettingProblem(str(exc), "llm_criteria_file") from None
        return self

    llm_sample_rate: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Share judged of the requests that are not flagged (of all, with "
        "TRACEJUDGE_LLM_JUDGE_FLAGGED=false) and that no TRACEJUDGE_LLM_SAMPLE_RATES entry is "
        "about; the same ones every time (a hash of the request id). The default, 1, judges "
        "every closed request: a judge turned on (an endpoint, or only TRACEJUDGE_LLM_API_KEY) "
        "reads every run until told to read fewer; the start logs the share.",
    )
    llm_sample_rates: str = Field(
        "",
        description="Rates per agent or agent version instead of TRACEJUDGE_LLM_SAMPLE_RATE, "
        "as agent=rate,agent@version=rate (glob patterns: planner@2.*=0.5,research-*=0.05); "
        "an entry with a version wins over one without, else the first that matches.",
    )
    llm_judge_flagged: bool = Field(
        True,
        description="Judge every flagged request (not passed, not success, or incomplete by the "
        "rules) whatever the sample rates; false: flagged requests are sampled like the rest.",
    )
    llm_judge_sessions: bool = Field(
        True,
        description="With the LLM judge on (and judging in the worker): it also reads each "
        "session's new turn with its summary of the conversation so far, and its reading is "
        "blended into the session verdict (docs/sessions.md); false: session verdicts are the "
        "rules'.",
    )
    llm_max_input_chars: int | None = Field(
        None,
        ge=2000,
        description="A limit in characters on the judge's input beside its token budget "
        "(TRACEJUDGE_LLM_CONTEXT_TOKENS); unset: the token budget alone.",
    )
    llm_context_tokens: int = Field(
        8192,
        ge=2048,
        description="The judge model's context size in tokens: the system prompt, the answer's "
        "schema, the trace and the answer's reserve fit in it (tokens estimated to err high: 3 "
        "ASCII characters or 1 other character a token). When a trace does not fit, its goal, "
        "final answer and failed steps are kept first, then its last steps; the input says "
        "what it left out. Raise it for a large-context model (e.g. 128000) at more cost.",
    )
    llm_output_reserve_tokens: int | None = Field(
        None,
        ge=64,
        description="Tokens of the context kept for the answer; unset: "
        "TRACEJUDGE_LLM_MAX_TOKENS (a server refuses a request whose input and max tokens "
        "exceed the context).",
    )
    llm_tool_choice: str = Field(
        LLMConfig.tool_choice,
        pattern="^(named|required|auto|none)$",
        description="tool_choice: named (OpenAI, vLLM), required, auto (Ollama), none.",
    )
    llm_output_mode: Literal["tools", "json_schema"] = Field(
        "tools",
        description="How the judge is asked to answer: tools (a final_judge function call: "
        "OpenAI, vLLM with tool parsing, Ollama) or json_schema (response_format with the "
        "verdict's schema, strict: OpenAI, vLLM, llama.cpp's server, Ollama's OpenAI API).",
    )
    llm_schema_strict: bool = Field(
        True,
        description="json_schema mode: strict schema (OpenAI; string lengths left out, since "
        "strict refuses them) or not (llama.cpp, vLLM, Ollama: the whole schema, lengths "
        "included, becomes a grammar, which keeps small models from looping in a string).",
    )
    llm_temperature: float | None = Field(
        LLMConfig.temperature,
        ge=0,
        le=2,
        description="Sampling temperature; unset: not sent (OpenAI's reasoning models, "
        "o-series and gpt-5, refuse any but their own).",
    )
    llm_max_tokens: int = Field(
        LLMConfig.max_tokens, ge=64, description="Max tokens of the judge's answer."
    )
    llm_retry_max_tokens: int | None = Field(
        None,
        ge=0,
        description="An answer cut at TRACEJUDGE_LLM_MAX_TOKENS (finish_reason length; "
        "judge_error truncated when the retry is cut too) is asked once more with twice the "
        "budget, at most this and at most what TRACEJUDGE_LLM_CONTEXT_TOKENS leaves beside the "
        "input; unset: twice, 0: no retry. A reasoning model's hidden reasoning spends the same "
        "budget: raise TRACEJUDGE_LLM_MAX_TOKENS for one (docs/judging.md).",
    )
    llm_token_param: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens",
        description="Name under which TRACEJUDGE_LLM_MAX_TOKENS is sent: max_tokens (vLLM, "
        "Ollama, llama.cpp, older OpenAI models) or max_completion_tokens (OpenAI's reasoning "
        "models, which refuse max_tokens; it also counts their hidden reasoning tokens).",
    )
    llm_seed: int | None = Field(
        LLMConfig.seed,
        description="Seed sent with every call, for answers as repeatable as the server makes "
        "them; unset: not sent.",
    )
    llm_queue_wait_s: float = Field(
        LLMConfig.queue_wait_s,
        gt=0,
        description="Longest wait of a judge call for a free slot in its worker (and a "
        "TRACEJUDGE_LLM_RPM permit) before it goes out; then a timeout fallback. "
        "TRACEJUDGE_LLM_TIMEOUT_S starts when the call goes out.",
    )
    llm_job_max_age_s: float = Field(
        600.0,
        gt=0,
        description="Longest a judge job may wait in the judge queue (from its request's "
        "close). Older, it is not sent: the rules' verdict, published at close as pending, "
        "becomes final with the reason (judge_status skipped), counted in "
        "tracejudge_judge_expired. Bounds how stale a reflection or alert may come.",
    )
    llm_retry_after_max_s: float = Field(
        LLMConfig.retry_after_max_s,
        gt=0,
        description="Longest wait on a 429 or 503 before trying again (a longer Retry-After is "
        "cut to it); pushbacks are waited out until the deadline, never breaker failures.",
    )
    llm_breaker_failures: int = Field(
        5, ge=1, description="Consecutive failures that open the circuit breaker."
    )
    llm_breaker_cooldown_s: float = Field(
        30.0, gt=0, description="Open-circuit time before one probe call."
    )
    llm_cache_ttl_s: int = Field(
        7 * 86400, ge=1, description="TTL of cached verdicts in Redis (by input hash)."
    )
    llm_alert_fallback_rate: float = Field(
        0.5, ge=0, le=1, description="Fallback share over the window that raises an alert."
    )
    llm_alert_window_s: float = Field(
        300.0, gt=0, description="Window of the judge_unavailable alert."
    )
    llm_alert_min_requests: int = Field(
        10, ge=1, description="Judged requests in the window before the alert can fire."
    )
    llm_price_input_per_mtok: float | None = Field(
        None,
        ge=0,
        description="USD per million input tokens of TRACEJUDGE_LLM_MODEL, for each judged "
        "evaluation's cost_usd and tracejudge_judge_cost_usd_total; unset: no cost figure.",
    )
    llm_price_cached_input_per_mtok: float | None = Field(
        None,
        ge=0,
        description="USD per million cached input tokens; unset: the input price.",
    )
    llm_price_output_per_mtok: float | None = Field(
        None, ge=0, description="USD per million output tokens (set with the input price)."
    )
    llm_budget_tokens_per_minute: int = Field(
        0,
        ge=0,
        description="Judge tokens (input + output, as the server reports them) per UTC minute, "
        "shared by all judge processes via Redis; once spent, requests are not sent to the "
        "model and their evaluations say so (judge_status skipped). 0: no cap.",
    )
    llm_budget_tokens_per_day: int = Field(
        0, ge=0, description="Judge tokens per UTC day, as the per-minute cap. 0: no cap."
    )
    llm_budget_usd_per_minute: float = Field(
        0.0, ge=0, description="Judge spend per UTC minute (needs the prices). 0: no cap."
    )
    llm_budget_usd_per_day: float = Field(
        0.0, ge=0, description="Judge spend per UTC day (needs the prices). 0: no cap."
    )

    @field_validator(
        "llm_temperature",
        "llm_seed",
        "llm_max_input_chars",
        "llm_output_reserve_tokens",
        "llm_retry_max_tokens",
        mode="before",
    )
    @classmethod
    def _unset(cls, value: Any) -> Any:
        # "unset" (or empty) leaves the parameter out of the request
        if isinstance(value, str) and value.strip().lower() in ("", "unset", "none"):
            return None
        return value

    @field_validator("llm_sample_rates")
    @classmethod
    def _rates_parse(cls, value: str) -> str:
        parse_rates(value)  # a bad entry stops the start, named (not a silently full rate)
        return value

    @field_validator(
        "llm_price_input_per_mtok",
        "llm_price_cached_input_per_mtok",
        "llm_price_output_per_mtok",
        mode="before",
    )
    @classmethod
    def _price_unset(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("", "unset", "none"):
            return None
        return value

    @model_validator(mode="after")
    def _priced(self) -> Self:
        # a cost from half a price list, or a spend cap with no price, would never be right:
        # stop at start, named, rather than publish no cost or never cap
        prices = (self.llm_price_input_per_mtok, self.llm_price_output_per_mtok)
        if (prices[0] is None) != (prices[1] is None):
            given, missing = ("input", "output") if prices[1] is None else ("output", "input")
            raise SettingProblem(
                f"unset while TRACEJUDGE_LLM_PRICE_{given.upper()}_PER_MTOK is set: set both, "
                "or neither",
                f"llm_price_{missing}_per_mtok",
            )
        caps = [
            name
            for name in ("llm_budget_usd_per_minute", "llm_budget_usd_per_day")
            if getattr(self, name)
        ]
        if prices[0] is None and caps:
            raise SettingProblem(
                f"a spend cap ({' and '.join(PREFIX + name.upper() for name in caps)}) needs "
                "TRACEJUDGE_LLM_PRICE_INPUT_PER_MTOK and TRACEJUDGE_LLM_PRICE_OUTPUT_PER_MTOK, "
                "to count what the calls cost",
                *caps,
                "llm_price_input_per_mtok",
                "llm_price_output_per_mtok",
            )
        return self

    @property
    def llm_input_tokens(self) -> int:
        """Tokens the judge's input (the trace's message) may take: the context less the
        answer's reserve, the system prompt and the answer's schema."""
        reserve = self.llm_output_reserve_tokens or self.llm_max_tokens
        return input_token_budget(self.llm_context_tokens, reserve, final_judge_prompt())

    @model_validator(mode="after")
    def _fits_context(self) -> Self:
        # a context the prompt and the reserve nearly fill leaves no room for any trace: every
        # judged request would be "the trace is too large to show"
        if self.llm_input_tokens < MIN_INPUT_TOKENS:
            reserve = (
                "llm_max_tokens"
                if self.llm_output_reserve_tokens is None
                else "llm_output_reserve_tokens"
            )
            raise SettingProblem(
                f"TRACEJUDGE_LLM_CONTEXT_TOKENS ({self.llm_context_tokens}) leaves "
                f"{self.llm_input_tokens} tokens for the trace after the answer's reserve "
                f"({PREFIX}{reserve.upper()}={getattr(self, reserve)}) and the judge's "
                f"prompt; at least {MIN_INPUT_TOKENS} are needed",
                "llm_context_tokens",
                reserve,
            )
        return self
