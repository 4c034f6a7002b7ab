"""What tracejudge emits: evaluations, reflection requests and alerts."""

from __future__ import annotations

from typing import Annotated, Literal, Required

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from typing_extensions import TypedDict

from tracejudge.models.ids import stable_id
from tracejudge.models.modes import FailureMode

Score = int
JudgeStatus = Literal["ok", "fallback", "disabled", "skipped"]
JudgeErrorCode = Literal[
    "timeout",
    "connect",
    "http_5xx",
    "http_4xx",
    "rate_limited",
    "invalid_output",
    "truncated",  # the answer was cut at its token limit (finish_reason length), retried too
    "circuit_open",
    "budget",
    "internal",
]


class _Output(BaseModel):
    # Readers ignore fields they do not know: a consumer on an older client must still read an
    # evaluation from a newer worker that added a field (additive changes are not breaking).
    # What we produce stays the schema: an ignored field is not stored, so never dumped, and
    # the mypy plugin's init_forbid_extra (pyproject.toml) rejects one passed by name.
    model_config = ConfigDict(extra="ignore")


class FailedStep(_Output):
    index: int | None = Field(description="step_index of the failed step, when known.")
    tool: str | None = None
    reason: str


class Finding(_Output):
    """A rule that fired on the request, with the evidence it read (masked). A team's own check
    is `check:<name>`, with its `version`."""

    rule: str
    evidence: str
    version: str | None = Field(default=None, description="A team's check: its version.")
    step: int | None = Field(
        default=None, description="A team's check: the step_index its failure points at."
    )


RemainingKind = Literal[
    "failed_call", "planned_step", "claimed_not_done", "confirmed_not_done", "request_pending",
    "judge",
]  # fmt: skip


class RemainingStep(_Output):
    """One piece of work a run left undone, read from its trace: what to do, and why it is
    left. Never the answer's prose: a failed call names its tool, arguments and error, a
    planned step is named as declared, a pending request by what is pending."""

    kind: RemainingKind = Field(
        description="failed_call: a call that failed and was never made good; planned_step: "
        "declared, never attempted; claimed_not_done: the answer claims an action no "
        "successful call did; confirmed_not_done: the user said yes, nothing was done; "
        "request_pending: the user's request is left unanswered or unfinished; judge: the LLM "
        "judge's reading, when the trace showed nothing left."
    )
    step: str = Field(
        description="What to do: the tool to call again, the planned step as declared, or the "
        "request to finish. A follow-up run declares these as its planned steps."
    )
    why: str = Field(description="Why it is left: the error, never attempted, the evidence.")
    step_index: int | None = Field(default=None, description="The step that failed, if one did.")
    tool: str | None = None
    args: str | None = Field(default=None, description="The failed call's arguments (clipped).")
    error: str | None = Field(default=None, description="The failed call's error (clipped).")

    def words(self) -> str:
        """One line: the step (with its arguments) and why."""
        head = f"{self.step}({self.args})" if self.args else self.step
        return f"{head}: {self.why}"


class Blame(_Output):
    """The step most likely responsible for a run that is not a clean pass, and who took it;
    or an abstention with the reason."""

    step_index: int | None = Field(default=None, description="The step to blame.")
    actor: str | None = Field(
        default=None,
        description="Who took it: the step's actor (multi-agent runs), else its tool, else the "
        "request's agent.",
    )
    reason: str
    confidence: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="How strongly the evidence points at this step: a prior per kind of "
        "evidence (docs/judging.md: Blame), not a calibrated probability.",
    )
    source: Literal["rules", "judge"] | None = None
    abstain: bool = Field(default=False, description="True: no step can be named; reason says why.")


class PublishedScores(TypedDict, total=False):
    """DimensionScores as published: the judge's scores are absent when it gave none, never
    null (what the serializer returns, so the published schema says it too)."""

    completeness: Required[Annotated[int, Field(ge=0, le=100)]]
    execution_health: Required[Annotated[int, Field(ge=0, le=100)]]
    efficiency: Required[Annotated[int, Field(ge=0, le=100)]]
    correctness: Annotated[int, Field(ge=0, le=100, description="LLM judge")]
    relevance: Annotated[int, Field(ge=0, le=100, description="LLM judge")]
    actionability: Annotated[int, Field(ge=0, le=100, description="LLM judge")]
    criteria: dict[str, Annotated[int, Field(ge=0, le=100)]]


DimensionName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{1,39}$")]


class DimensionScores(_Output):
    """Named scores 0-100: always the three rule dimensions, the judge's three when it gave
    them, and the agent's team's own dimensions the judge scored (`criteria`). A dimension
    without a score is left out, never null."""

    completeness: Score = Field(ge=0, le=100)
    execution_health: Score = Field(ge=0, le=100)
    efficiency: Score = Field(ge=0, le=100)
    correctness: Score | None = Field(default=None, ge=0, le=100, description="LLM judge")
    relevance: Score | None = Field(default=None, ge=0, le=100, description="LLM judge")
    actionability: Score | None = Field(default=None, ge=0, le=100, description="LLM judge")
    criteria: dict[DimensionName, Annotated[int, Field(ge=0, le=100)]] = Field(
        default_factory=dict,
        max_length=8,
        description="LLM judge: the dimensions the agent's team asked it to score "
        "(TRACEJUDGE_LLM_CRITERIA_FILE), by name; left out when none.",
    )

    @model_serializer(mode="wrap")
    def _without_missing(self, handler: SerializerFunctionWrapHandler) -> PublishedScores:
        published: PublishedScores = {
            k: v for k, v in handler(self).items() if v is not None and v != {}
        }  # type: ignore[assignment]
        return published


class Usage(_Output):
    """Model calls of one request, summed over the steps that reported usage."""

    model_calls: int = Field(ge=0)
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cost_usd: float | None = Field(default=None, ge=0, description="None: no step gave a cost.")
    models: list[str] = Field(default_factory=list, description="The first few model names.")


class JudgeCall(_Output):
    """Who judged and what it took: on every evaluation the LLM judge handled (judge_status
    ok or fallback), absent on rule-only ones."""

    requested_model: str = Field(description="TRACEJUDGE_LLM_MODEL, as sent.")
    returned_model: str | None = Field(
        default=None, description="The answer's `model` (a snapshot of the alias, often)."
    )
    prompt_version: str = Field(description="A hash of the system prompt and answer schema.")
    criteria_version: str | None = Field(
        default=None,
        description="The version of the agent's team's criteria given to the judge "
        "(TRACEJUDGE_LLM_CRITERIA_FILE); None: none.",
    )
    cached: bool = Field(description="The answer came from the verdict cache: no call made.")
    attempts: int = Field(ge=0, description="Calls sent to the server, retries included.")
    latency_s: float | None = Field(
        default=None, ge=0, description="From the first call out to the last reply."
    )
    input_tokens: int | None = Field(
        default=None, ge=0, description="Summed over the attempts; None: no reply reported usage."
    )
    output_tokens: int | None = Field(default=None, ge=0)
    cached_input_tokens: int | None = Field(
        default=None, ge=0, description="Part of input_tokens; None: the server did not say."
    )
    cost_usd: float | None = Field(
        default=None, ge=0, description="From the TRACEJUDGE_LLM_PRICE_* settings; None: unset."
    )
    steps_omitted: int = Field(default=0, ge=0, description="Steps the prompt left out.")
    input_left_out: dict[
        Annotated[str, Field(pattern=r"^[a-z_]{1,48}$")], Annotated[int, Field(ge=1)]
    ] = Field(
        default_factory=dict,
        max_length=24,
        description="What the prompt left out or shortened to fit its budget, as its own "
        "`left_out` told the judge: steps omitted by kind (tool_call, reasoning, user_turn, "
        "iteration, failed_step), planned_steps omitted, failed steps shortened to a digest "
        "(failed_steps_shortened_to_digests), merged into an entry of repeats "
        "(failed_steps_merged_into_repeats) or listed only as a compact line of step indexes, "
        "tool and error head (failed_steps_listed_compactly); goal_clipped and "
        "final_output_clipped (1: head and tail kept). Counts only. Empty: nothing left out.",
    )
    input_halved: bool = Field(
        default=False, description="The server said the context was exceeded: sent at half size."
    )


class CalibrationUsed(_Output):
    """The calibration that set an evaluation's warn_threshold (judges/agreement/calibration.py)."""

    id: str = Field(description="Deterministic: from the agent, threshold, target and counts.")
    threshold: int = Field(ge=0, le=100)
    target: float = Field(gt=0, lt=1, description="The share of ok runs it aims to alert.")
    ok_runs: int = Field(ge=0, description="Ok outcomes it was learned from.")
    failed_runs: int = Field(ge=0, description="Failed outcomes it was learned from.")


class Origin(_Output):
    """The request a follow-up continues (its task_started's parent_request_id) and that
    request's final verdict, as the worker found it when the follow-up closed."""

    request_id: str = Field(description="The request this one follows up (its parent).")
    root_request_id: str = Field(
        description="The chain's first request: the parent's origin's, or the parent itself."
    )
    found: bool = Field(
        description="The parent's verdict was found (kept in Redis for the agreement "
        "retention). False: no Redis, never seen, or expired: the fields below are None."
    )
    reflection_round: int | None = Field(default=None, ge=0, description="The parent's round.")
    overall_score: Score | None = Field(default=None, ge=0, le=100)
    success: bool | None = None
    incomplete: bool | None = None
    verdict_ts: float | None = Field(
        default=None, description="When the parent's final verdict was made (whole seconds)."
    )


class InterventionMade(BaseModel):
    """An intervention sent to a run while it ran, as its evaluation lists it."""

    intervention_id: str
    kind: Literal["budget", "loop", "check"]
    crossed: str = Field(description="The budget's limit or the loop rule (Intervention.crossed).")
    action: Literal["stop", "steer"]
    at_step: int | None = Field(default=None, ge=0, description="The crossing event's step.")
    steps_after: int = Field(
        ge=0,
        description="Steps made after the crossing event (the final response not counted).",
    )
    stopped_after: bool = Field(
        description="The run ended for it: its final response names this intervention "
        "(`stopped_by`), or it made no step after the crossing event."
    )
    read: bool | None = Field(
        default=None,
        description="A steer's: the agent's model was given it (its client reported so with "
        "the final response); false: it came after the agent's last model call. None: not "
        "reported (a stop, or a client that does not say).",
    )


class Saving(BaseModel):
    """What a run stopped by an intervention did not spend: a floor, estimated from its
    agent's median run (judges/inflight/savings.py)."""

    tool_calls: int = Field(ge=0)
    tokens: int | None = Field(default=None, ge=0, description="None: the run reported none.")
    cost_usd: float | None = Field(default=None, ge=0, description="None: no cost reported.")


class Evaluation(_Output):
    type: Literal["evaluation"] = "evaluation"
    evaluation_id: str = Field(
        description="Deterministic: same request and evaluator version give the same id."
    )
    evaluator_version: str
    request_id: str
    session_key: str | None = None
    agent_name: str | None = None
    agent_version: str | None = Field(default=None, description="As the request's events gave it.")
    task_id: str | None = None
    overall_score: Score = Field(ge=0, le=100)
    overall_exact: float | None = Field(
        default=None,
        ge=0,
        le=100,
        description="overall_score before rounding, cut to one decimal: what `passed` tested "
        "against the threshold (59.6 does not pass 60, and is shown as 59.6, not 60).",
    )
    rule_score: Score = Field(ge=0, le=100)
    llm_score: Score | None = Field(default=None, ge=0, le=100)
    dimension_scores: DimensionScores
    passed: bool = Field(description="overall_score >= warn_threshold")
    warn_threshold: int = Field(ge=0, le=100)
    success: bool = Field(description="The steps that ran succeeded.")
    incomplete: bool = Field(description="Part of the user's goal is still undone.")
    failed_steps: list[FailedStep] = Field(default_factory=list)
    remaining_steps: list[str] = Field(
        default_factory=list, description="`remaining`, one line each (RemainingStep.words)."
    )
    remaining: list[RemainingStep] = Field(
        default_factory=list, description="The work left undone, step by step, from the trace."
    )
    blame: Blame | None = Field(
        default=None,
        description="A verdict that is not a clean pass (not passed, not successful, or "
        "incomplete): the step most likely responsible, or an abstention. None: a clean pass.",
    )
    summary: str
    reasons: list[str] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(
        default_factory=list, description="Each rule that fired, with its evidence."
    )
    judge_status: JudgeStatus = Field(
        description="ok: the LLM judge's answer is blended in; fallback: it gave none "
        "(judge_error says why), the rules decide; disabled: the judge is off; skipped: not "
        "sent to it (reasons say why), or not yet (final false)."
    )
    final: bool = Field(
        default=True,
        description="False: the rules' verdict, published at close while the LLM judge's is "
        "on its way (judge_status skipped); the next evaluation with the same evaluation_id "
        "replaces it. Reflection requests and alerts follow the final verdict only.",
    )
    judge_error: JudgeErrorCode | None = Field(
        default=None, description="Why the judge gave no valid answer (judge_status fallback)."
    )
    closed_by: Literal["final_response", "idle_timeout"]
    step_count: int = Field(ge=0)
    steps_dropped: int = Field(ge=0)
    events_over_cap: int = Field(
        default=0,
        ge=0,
        description="Events of the request past the worker's cap on events per request "
        "(TRACEJUDGE_MAX_EVENTS_PER_REQUEST): counted, not read; the verdict is on the run up "
        "to the cap.",
    )
    reflection_round: int = Field(default=0, ge=0)
    origin: Origin | None = Field(
        default=None,
        description="A follow-up (its task_started names a parent_request_id): the request it "
        "continues and that request's verdict. None: the first request of its chain.",
    )
    chain_final: bool | None = Field(
        default=None,
        description="True: no further round is asked for after this verdict (complete, the "
        "rounds' bound reached, or reflection off): the chain's last verdict, unless the agent "
        "starts a follow-up of its own. False: a reflection request went out with it. None: "
        "not decided yet (final false: the judge's verdict decides).",
    )
    iterations_used: int | None = Field(default=None, description="Iterative workflows only.")
    max_iterations: int | None = None
    stopped_early: bool | None = Field(
        default=None, description="A stop/finalize decision was made and the loop ended early."
    )
    early_stop_decided: bool | None = Field(
        default=None,
        description="A stop/finalize decision was sent for this loop (whether or not it "
        "stopped). None: not an iterative workflow.",
    )
    interventions: list[InterventionMade] = Field(
        default_factory=list,
        description="Budget and loop interventions sent while the run ran (at most one per "
        "kind), and whether it stopped after each.",
    )
    saved: Saving | None = Field(
        default=None,
        description="A run an intervention stopped: what it did not spend, estimated from its "
        "agent's median run (a floor). None: not stopped, or no baseline for its agent yet.",
    )
    usage: Usage | None = Field(
        default=None, description="Model calls, tokens and cost; None when no step reported any."
    )
    trace_id: str | None = Field(default=None, description="The request's OpenTelemetry trace.")
    span_id: str | None = Field(default=None, description="The request's OpenTelemetry span.")
    timeline: Literal["kept", "not_flagged", "off", "no_redis"] | None = Field(
        default=None,
        description="Whether the worker kept the request's step timeline in Redis beside this "
        "evaluation (kept, for the evaluation's TTL), or why not: not_flagged (passed, "
        "succeeded, complete, with TRACEJUDGE_TIMELINES=flagged), off "
        "(TRACEJUDGE_TIMELINES=off), no_redis (the worker had no Redis). None: not recorded.",
    )
    judge: JudgeCall | None = Field(
        default=None,
        description="The LLM judge's model, prompt, attempts, latency, tokens and cost; None "
        "when the judge did not handle the request (judge_status disabled or skipped).",
    )
    calibration: CalibrationUsed | None = Field(
        default=None,
        description="The agent's calibrated alert threshold that made this verdict (learned "
        "from its outcomes); None: the configured warn_threshold applied.",
    )
    mode: FailureMode | None = Field(
        default=None,
        description="The failure mode it belongs to (docs/modes.md): made from the verdict "
        "itself, without a model call. None: a clean pass.",
    )
    ts: float


class ReflectionRequest(_Output):
    type: Literal["reflection_request"] = "reflection_request"
    reflection_id: str
    evaluation_id: str
    request_id: str
    session_key: str | None = None
    agent_name: str | None = None
    task_id: str | None = None
    goal: str
    summary: str
    failed_steps: list[FailedStep] = Field(default_factory=list)
    remaining_steps: list[str] = Field(default_factory=list)
    # the work left, step by step (older workers send none: then remaining_steps only)
    remaining: list[RemainingStep] = Field(default_factory=list)
    blame: Blame | None = None
    # the evaluation's suggestions: what the follow-up run should do differently (added for
    # the client's reflection worker; older workers send none)
    suggestions: list[str] = Field(default_factory=list)
    reflection_round: int = Field(ge=1, description="The task's round + 1.")
    ts: float


class Alert(_Output):
    type: Literal["alert"] = "alert"
    alert_id: str
    kind: Literal[
        "low_score",
        "reflection_exhausted",
        "judge_unavailable",
        "retries_exhausted",
        "low_dimension",
        "session_low_score",
    ]
    severity: Literal["info", "warning", "critical"]
    request_id: str | None
    evaluation_id: str | None = None
    session_id: str | None = Field(
        default=None, description="A session_low_score alert's: the session's session_key."
    )
    dimension: str | None = Field(
        default=None, description="A low_dimension alert's: the team's dimension scored low."
    )
    message: str
    ts: float

    @classmethod
    def of(
        cls,
        kind: str,
        basis: str,
        severity: str,
        message: str,
        ts: float,
        *,
        request_id: str | None,
        evaluation_id: str | None = None,
        session_id: str | None = None,
        dimension: str | None = None,
    ) -> Alert:
        """An alert whose id is derived from its kind and what it is about (`basis`). The ids
        are named: a misspelt one is an error here, not a field the model would ignore."""
        return cls.model_validate(
            {
                "alert_id": stable_id("alert", kind, basis),
                "kind": kind,
                "severity": severity,
                "message": message,
                "ts": ts,
                "request_id": request_id,
                "evaluation_id": evaluation_id,
                "session_id": session_id,
                **({} if dimension is None else {"dimension": dimension}),
            }
        )


class RetryRequest(_Output):
    type: Literal["retry_request", "retry_exhausted"] = "retry_request"
    retry_id: str = Field(description="Deterministic per response: duplicates share it.")
    session_id: str
    request_id: str | None = None
    agent: str | None = None
    attempt: int = Field(
        ge=0, description="retry_request: the next attempt; retry_exhausted: the last one."
    )
    response_type: Literal["generic", "clarification", "substantive"]
    detected_pattern: str | None = None
    reasons: list[str] = Field(default_factory=list)
    continue_prompt: str | None = Field(
        default=None, description="What to send the agent's session (retry_request only)."
    )
    ts: float


class EarlyStopDecision(_Output):
    type: Literal["early_stop"] = "early_stop"
    decision_id: str = Field(description="Deterministic per request, iteration and action.")
    request_id: str
    iteration: int = Field(ge=1)
    action: Literal["stop", "finalize", "hint"]
    reason: Literal[
        "conclusion", "task_status", "observation_success", "no_experiment", "consecutive_success"
    ]
    evidence: str
    ts: float
    run_nonce: str | None = Field(
        default=None,
        description="The run's nonce (its events' run_nonce): a client of another run of the "
        "same request id refuses the decision.",
    )
    signature: str | None = Field(
        default=None,
        description="hmac-sha256:<hex> over the record without this field, with the worker's "
        "first TRACEJUDGE_CONTROL_KEYS key, or ed25519:<key id>:<base64> with its private key "
        "(models/signing.py); null when no key is set.",
    )


class Intervention(_Output):
    """A run told, while it runs, that it crossed a budget or is in a loop. On the
    control topic, keyed by request id, beside early-stop decisions."""

    type: Literal["intervention"] = "intervention"
    intervention_id: str = Field(
        description="Deterministic per request, kind and what was crossed: at most one each."
    )
    request_id: str
    agent_name: str | None = None
    kind: Literal["budget", "loop", "check"]
    crossed: str = Field(
        description="budget: the limit (steps, tool_calls, tokens, cost_usd, wall_s); loop: the "
        "rule (repeated_call, alternating_calls, repeated_failure, no_new_result); check: the "
        "team's check (docs/checks.md)."
    )
    allowed: float | None = Field(default=None, description="budget: the limit's value.")
    used: float | None = Field(default=None, description="budget: the count that crossed it.")
    evidence: str = Field(description="What crossed the line, in words; masked.")
    action: Literal["stop", "steer"] = Field(
        description="stop: end the run; steer: send `message` to the agent and let it go on."
    )
    message: str = Field(description="What to tell the agent (or the user) about it.")
    normal: str | None = Field(
        default=None,
        description="loop: how long the agent's runs usually are against this run, or that "
        "no normal is learned for it yet (then it is only steered).",
    )
    step_index: int | None = Field(default=None, ge=0, description="The crossing event's step.")
    ts: float
    run_nonce: str | None = Field(
        default=None,
        description="The run's nonce (the crossing event's run_nonce): a client of another run "
        "of the same request id refuses the intervention.",
    )
    signature: str | None = Field(
        default=None,
        description="hmac-sha256:<hex> over the record without this field, with the worker's "
        "first TRACEJUDGE_CONTROL_KEYS key, or ed25519:<key id>:<base64> with its private key "
        "(models/signing.py); null when no key is set.",
    )
