"""Event contract v1: what agents publish on `tracejudge.events`.

Unknown fields are dropped and long texts are clipped (and flagged) on the way in, so a
window never holds more than the contract allows: no full chain-of-thought is ever stored.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

import pydantic_core
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from tracejudge.models.errors import InvalidEvent

CONTRACT_VERSION = 1
SUMMARY_LIMIT = 2_000
LONG_TEXT_LIMIT = 8_000
MAX_PLANNED_STEPS = 100
CLIP_MARK = " …[clipped]"
# an outcome's source: a short lowercase token, so it can be a label and a Redis hash field
OUTCOME_SOURCE = r"^[a-z][a-z0-9_-]{0,31}$"
_CUT_MARK = " …[clipped {}]… "  # where the middle went, and how many characters of it


def clip(text: str, limit: int) -> str:
    """Clip `text` to at most `limit` characters: its head and its tail, with a mark saying how
    much of the middle was cut. A log's last lines are usually the ones that matter (a 107k
    build log's `BUILD FAILURE` is at its end), its first say what ran.

    Cuts through whatever is there: a text not masked yet is clipped by
    `judges.clipping.clip_whole`, which moves the cuts off secrets."""
    cuts = clip_cuts(text, limit)
    return text if cuts is None else clip_between(text, *cuts)


# How an event's text over its limit is clipped as the event is parsed, before anything is
# masked: a secret across this cut would leave, in every output, a fragment the masker cannot
# recognise. Importing `tracejudge.judges` (the worker, replay) installs a clip that moves the
# cut off secrets (judges/masking/clipping.py); the models cannot import it (they import nothing of
# ours: pyproject's import contracts), and the light client, which parses events with these
# models but masks nothing, must not load the detectors: it keeps the plain cut.
_arrival_clip: Callable[[str, int], str] = clip


def set_arrival_clip(clip_: Callable[[str, int], str]) -> None:
    """Clip arriving texts with `clip_` (same contract as `clip`: at most `limit` characters)."""
    global _arrival_clip
    _arrival_clip = clip_


def clip_cuts(text: str, limit: int) -> tuple[int, int] | None:
    """Where `clip` cuts `text`: the head's end and the tail's start (equal: no tail, no
    mark); None when it fits."""
    if len(text) <= limit:
        return None
    mark = _CUT_MARK.format(len(text) - limit)
    for _ in range(3):  # the count's own digits change how much is cut: settle it
        mark = _CUT_MARK.format(len(text) - (limit - len(mark)))
    keep = limit - len(mark)
    if keep < 2:  # too short for a mark and both ends
        return limit, len(text)
    head = (keep + 1) // 2
    return head, len(text) - (keep - head)


def clip_between(text: str, head_end: int, tail_start: int) -> str:
    """`text` without [head_end, tail_start), a mark counting what went in its place; with no
    tail (tail_start at the end) only the head, as `clip` does when the limit is too short."""
    if tail_start >= len(text):
        return text[:head_end]
    return text[:head_end] + _CUT_MARK.format(tail_start - head_end) + text[tail_start:]


_NONCE = re.compile(r"[A-Za-z0-9_-]{8,64}")


def _nonce_or_none(value: object) -> str | None:
    """A run nonce as the client makes it, else none: a malformed nonce costs the run its
    per-run check on control records (the time rule still holds), never the step it is on."""
    return value if isinstance(value, str) and _NONCE.fullmatch(value) else None


class _Event(BaseModel):
    # strict: a JSON string is never silently turned into a number or a boolean.
    model_config = ConfigDict(extra="ignore", strict=True)

    # field name -> character limit; applied after validation, flagged in `clipped`.
    TEXT_LIMITS: ClassVar[dict[str, int]] = {}

    request_id: str = Field(min_length=1, max_length=256)
    event_id: str | None = Field(default=None, min_length=1, max_length=512)
    session_key: str | None = Field(default=None, max_length=256)
    agent_name: str | None = Field(default=None, max_length=256)
    # the agent's build, prompt or config revision: the explorer marks where it changed and
    # compares the verdicts before and after
    agent_version: str | None = Field(default=None, max_length=128)
    task_id: str | None = Field(default=None, max_length=256)
    # in a multi-agent run, who took this step (the agent, or the tool executor, that spoke or
    # acted): what a failed verdict's blame names beside the step; the request's own agent
    # stays `agent_name`
    actor: str | None = Field(
        default=None,
        max_length=256,
        description="Multi-agent runs: the agent (or tool executor) that took this step, "
        "e.g. a LangGraph node or an Agents SDK agent; absent: the request's agent.",
    )
    ts: float | None = Field(default=None, description="Epoch seconds.")
    # random per run of a request, made by the agent's client: the worker copies it into the
    # control records it signs for the run, so a record of an earlier run of the same request
    # id (replayed, or read back) is never taken by this one
    run_nonce: Annotated[str | None, BeforeValidator(_nonce_or_none)] = Field(
        default=None,
        description="Random per run of the request (the client makes one), 8-64 of "
        "A-Za-z0-9_-: copied into the interventions and early-stop decisions signed for this "
        "run, which a client of another run of the same request id refuses. Any other value "
        "is read as none (the step is kept).",
    )
    clipped: list[str] = Field(
        default_factory=list,
        description="Set by tracejudge: names of text fields that were clipped to their limit.",
    )

    @model_validator(mode="after")
    def _clip_texts(self) -> _Event:
        clipped = list(self.clipped)
        for name, limit in self.TEXT_LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, str) and len(value) > limit:
                object.__setattr__(self, name, _arrival_clip(value, limit))
                clipped.append(name)
        object.__setattr__(self, "clipped", clipped)
        return self

    @property
    def step(self) -> int | None:
        return getattr(self, "step_index", None)

    def resolved_event_id(self) -> str:
        """The event id, derived from request id, type and step index when absent."""
        if self.event_id:
            return self.event_id
        step = self.step
        kind = getattr(self, "type", "?")
        return f"{self.request_id}:{kind}:{'-' if step is None else step}"


class ModelUsage(BaseModel):
    """What one model call cost: attached to the step it produced (a reasoning step, a round, the
    final answer). Every field is optional; totals per request are in the evaluation."""

    model_config = ConfigDict(extra="ignore", strict=True)
    model: str | None = Field(default=None, max_length=256)
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = Field(default=None, ge=0.0)
    latency_ms: float | None = Field(default=None, ge=0.0)


class TaskStarted(_Event):
    TEXT_LIMITS: ClassVar[dict[str, int]] = {"goal": LONG_TEXT_LIMIT}
    type: Literal["task_started"]
    step_index: int | None = Field(default=None, ge=0)
    goal: str
    planned_steps: list[Annotated[str, Field(max_length=SUMMARY_LIMIT)]] = Field(
        default_factory=list, max_length=MAX_PLANNED_STEPS
    )
    parent_request_id: str | None = Field(default=None, max_length=256)
    reflection_round: int = Field(default=0, ge=0)
    # the agent's OpenTelemetry trace and span of this request (W3C hex): its evaluation is
    # exported linked to them when evaluations go back to OpenTelemetry
    trace_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{32}$")
    span_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{16}$")


class UserMessage(_Event):
    TEXT_LIMITS: ClassVar[dict[str, int]] = {"text": SUMMARY_LIMIT}
    type: Literal["user_message"]
    step_index: int = Field(ge=0)
    text: str


class ReasoningStep(_Event):
    TEXT_LIMITS: ClassVar[dict[str, int]] = {
        "intent_summary": SUMMARY_LIMIT,
        "action": SUMMARY_LIMIT,
        "observation_summary": SUMMARY_LIMIT,
        "error": SUMMARY_LIMIT,
    }
    type: Literal["reasoning_step"]
    step_index: int = Field(ge=0)
    phase: Literal["plan", "tool_call", "tool_observation", "synthesis"]
    intent_summary: str | None = None
    action: str | None = None
    observation_summary: str | None = None
    confidence: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="0-1; a percentage (above 1, up to 100) is read as its fraction.",
    )
    error: str | None = None
    usage: ModelUsage | None = None

    @field_validator("confidence", mode="before")
    @classmethod
    def _percentage(cls, value: Any) -> Any:
        # agents write confidence as 0.85 or as 85 (%); both mean the same, and refusing the
        # second would dead-letter the whole step for a matter of scale
        if isinstance(value, int | float) and not isinstance(value, bool) and 1 < value <= 100:
            return value / 100
        return value


class ToolCall(_Event):
    TEXT_LIMITS: ClassVar[dict[str, int]] = {
        "args_summary": SUMMARY_LIMIT,
        "error": SUMMARY_LIMIT,
        "result_preview": SUMMARY_LIMIT,
    }
    type: Literal["tool_call"]
    step_index: int = Field(ge=0)
    tool: str = Field(min_length=1, max_length=256)
    args_summary: str | None = None
    success: bool
    error: str | None = None
    latency_ms: float | None = Field(default=None, ge=0.0)
    result_preview: str | None = None


class Iteration(_Event):
    TEXT_LIMITS: ClassVar[dict[str, int]] = {
        "response": LONG_TEXT_LIMIT,
        "observation": SUMMARY_LIMIT,
    }
    type: Literal["iteration"]
    step_index: int = Field(ge=0)
    iteration: int = Field(ge=1)
    max_iterations: int | None = Field(default=None, ge=1)
    response: str | None = None
    observation: str | None = None
    exec_success: bool | None = None
    usage: ModelUsage | None = None


class Validation(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    verdict: Literal["pass", "warn", "block"]
    reasons: list[Annotated[str, Field(max_length=SUMMARY_LIMIT)]] = Field(
        default_factory=list, max_length=50
    )


# Why an agent's client refused a control record: no signature; a key it does not hold; a key
# past its date; a key it holds that did not make the signature; older than the run; made for
# another run of the request id (models/signing.py: ControlKeys.why_not)
REFUSALS = ("unsigned", "unknown_key", "expired_key", "bad_signature", "stale", "other_run")
_COUNT = Annotated[int, Field(ge=0, le=1_000_000)]


class ControlSeen(BaseModel):
    """What the agent's client did with the control records of this request, sent with its
    final response: how many it obeyed (`delivered`), refused and why, and took without
    checking them (`unverified`: signed records, and the agent holds no key). A worker and an
    agent with different keys is the operator's mistake to see: the worker counts these per
    agent (/metrics, /health, `tracejudge status`)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    verifies: bool = Field(description="The client holds control keys and checks signatures.")
    delivered: _COUNT = 0
    # by why (REFUSALS); a reason this version does not know is kept and counted as such
    refused: dict[Annotated[str, Field(max_length=32)], _COUNT] = Field(
        default_factory=dict, max_length=16
    )
    unverified: _COUNT = 0
    # the steers handed to the agent's model (their intervention ids): a steer that arrived
    # after the agent's last model call was never read, and is not counted as one that was
    read: list[Annotated[str, Field(max_length=128)]] = Field(default_factory=list, max_length=32)


class FinalResponse(_Event):
    TEXT_LIMITS: ClassVar[dict[str, int]] = {"output": LONG_TEXT_LIMIT, "error": SUMMARY_LIMIT}
    type: Literal["final_response"]
    step_index: int | None = Field(default=None, ge=0)
    # required: without it a final_response that named its answer otherwise (`text`, `answer`:
    # unknown fields are dropped) was judged as an empty answer; now it is dead-lettered with
    # the reason. An answer that really is empty is sent as "".
    output: str
    validation: Validation | None = None
    usage: ModelUsage | None = None
    stopped_by: str | None = Field(
        default=None,
        max_length=128,
        description="The intervention_id the run stopped for, when an intervention ended it.",
    )
    error: str | None = Field(
        default=None,
        description="Set when the run ended by an error (an exception out of the agent, a "
        "root span ended in ERROR): its text. Such a run failed and is incomplete, whatever "
        "`output` says.",
    )
    control: ControlSeen | None = Field(
        default=None,
        description="What the agent's client did with this request's control records "
        "(obeyed, refused and why, taken unverified); set by the client when it watched them.",
    )

    @field_validator("control", mode="wrap")
    @classmethod
    def _control_or_none(cls, value: Any, handler: Callable[[Any], Any]) -> Any:
        # a report about control, never a reason to lose the answer: one this version cannot
        # read is dropped, and the final response is judged as without it
        try:
            return handler(value)
        except ValidationError:
            return None


_WITH_USAGE = (ReasoningStep, Iteration, FinalResponse)


def usage_of(event: object) -> Any:
    """An event's `usage` (a ModelUsage; a dict in a window read back from its records), None
    for the event types that have none. Not `getattr(event, "usage", None)`: on a model without
    the field, pydantic raises and catches inside, the dearest part of an event's handling."""
    return event.usage if isinstance(event, _WITH_USAGE) else None


class Outcome(_Event):
    """Ground truth about a request, sent any time after its verdict (minutes to days later):
    a test that passed in CI, a refund that went through, a thumbs-down, a reviewer's call.

    Not a step of the request: it never opens, reopens or closes a window. The worker hands it
    to the agreement store, which joins it to the request's verdict; a second outcome of the
    same request and `source` replaces the first. `note` is a person's free text: clipped here,
    never stored by the worker and, like every text, masked wherever it is output.
    """

    TEXT_LIMITS: ClassVar[dict[str, int]] = {"note": SUMMARY_LIMIT}
    type: Literal["outcome"]
    ok: bool | None = Field(default=None, description="Whether the run did what it was for.")
    score: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="0-1, higher is better; counted ok at 0.5 or more when `ok` is absent.",
    )
    source: str = Field(
        default="user",
        pattern=OUTCOME_SOURCE,
        description="Where the truth comes from: a short lowercase token (human, test, reward, "
        "user, ...). One outcome per request and source counts; a later one replaces it.",
    )
    note: str | None = None
    signature: str | None = Field(
        default=None,
        description="hmac-sha256:<hex> with the source's key (models/signing.py); required "
        "when the worker has TRACEJUDGE_OUTCOME_KEYS.",
    )
    subject: Literal["request", "session"] = Field(
        default="request",
        description="What the truth is about: the request (`request_id`), or the whole "
        "conversation of `agent_name` and `session_key` (its final session verdict).",
    )

    @model_validator(mode="after")
    def _says_something(self) -> Outcome:
        # an outcome with neither would be counted as nothing, or worse as a default: refused
        if self.ok is None and self.score is None:
            raise ValueError("an outcome needs `ok` (true/false) or `score` (0-1), or both")
        if self.subject == "session" and not self.session_key:
            raise ValueError("an outcome about a session needs its `session_key`")
        return self

    @property
    def counted_ok(self) -> bool:
        """The outcome as agreement counts it: `ok` when given, else `score` >= 0.5."""
        if self.ok is not None:
            return self.ok
        assert self.score is not None  # the validator saw to it
        return self.score >= 0.5


class SessionEnd(_Event):
    """The end of a conversation (a session of requests sharing `session_key`): the session's
    verdict is made final now instead of after TRACEJUDGE_SESSION_IDLE_S of quiet. Keyed, like
    every event, by its `request_id`: the session's last request (the verdict waits for that
    request's turn), or any id of its own when the session ends outside a request.

    Not a step: it never opens, reopens or closes a request's window. A request of the session
    closing after it resumes the session, which is judged again (a new revision)."""

    TEXT_LIMITS: ClassVar[dict[str, int]] = {"reason": SUMMARY_LIMIT}
    type: Literal["session_end"]
    session_key: str = Field(min_length=1, max_length=256)  # type: ignore[assignment]
    reason: str | None = Field(
        default=None, description="Why it ended, in words (the user left, a hand-off, ...)."
    )


Event = Annotated[
    TaskStarted
    | UserMessage
    | ReasoningStep
    | ToolCall
    | Iteration
    | FinalResponse
    | Outcome
    | SessionEnd,
    Field(discriminator="type"),
]
STEP_TYPES = frozenset({"user_message", "reasoning_step", "tool_call", "iteration"})
# not part of any window: an outcome goes to the agreement store, a session's end to its session
OUTSIDE_WINDOWS = frozenset({"outcome", "session_end"})
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(event)"
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def decode_object(
    raw: bytes | str | dict[str, Any] | None, max_bytes: int | None = None
) -> dict[str, Any]:
    """A message value as a JSON object, or InvalidEvent saying why not.

    A value over `max_bytes` is refused before it is decoded: parsing it would cost time and
    memory for an event that the contract's limits would clip anyway.
    """
    if raw is None:
        raise InvalidEvent("empty", "message has no value")
    if max_bytes is not None and isinstance(raw, bytes | str) and len(raw) > max_bytes:
        raise InvalidEvent(
            "too_large", f"value of {len(raw):,} bytes is over the limit of {max_bytes:,}"
        )
    if isinstance(raw, bytes | str):
        # pydantic's JSON reader first: a quarter of the standard library's time on an event,
        # and the same values (NaN, integers of any size). What it refuses and the standard
        # library reads (a lone surrogate) is read again below, where errors are worded too.
        with contextlib.suppress(ValueError):
            raw = pydantic_core.from_json(raw)
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEvent("not_utf8", f"value is not valid UTF-8: {exc.reason}") from exc
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InvalidEvent("not_json", f"value is not JSON: {exc.msg} at {exc.pos}") from exc
        except RecursionError as exc:  # pydantic's reader stops at its depth limit first
            raise InvalidEvent("not_json", "value is nested too deeply to read") from exc
        # a lone surrogate (`"\udcff"`, which JavaScript's JSON.stringify and raw producers
        # write) read by the standard library: replaced, as UTF-8 cannot carry it and every
        # later encoding of the step would fail and lose it
        raw = _without_lone_surrogates(raw)
    if not isinstance(raw, dict):
        raise InvalidEvent("not_object", f"event must be a JSON object, got {type(raw).__name__}")
    if raw.get("type") is None:
        raise InvalidEvent("missing_type", "event has no 'type' field")
    return raw


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(value: Any) -> Any:
    """`value` with every lone surrogate in its texts (keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


def parse_event(raw: bytes | str | dict[str, Any] | None, max_bytes: int | None = None) -> Event:
    """Decode and validate one message value; raise InvalidEvent saying why not."""
    value = decode_object(raw, max_bytes)
    try:
        return EVENT_ADAPTER.validate_python(value)
    except ValidationError as exc:
        code = "unknown_type" if _is_unknown_type(exc) else "invalid_fields"
        raise InvalidEvent(code, describe(exc)) from exc


def _is_unknown_type(exc: ValidationError) -> bool:
    return any(err["type"] == "union_tag_invalid" for err in exc.errors())
