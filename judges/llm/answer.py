"""The judge's answer: one pydantic model, parsed from any of the three accepted forms.

(a) an OpenAI `tool_calls` entry for `final_judge` with JSON arguments;
(b) the text form `<sentra-tools><invoke name="final_judge"><parameter name="…">…</parameter>
    </invoke></sentra-tools>`;
(c) a bare JSON object in the content (optionally in a ``` fence).

We ask for final_judge's full shape (prompts/final_judge.schema.json) but accept the design
documents' shapes too, so a judge following either keeps its scores instead of becoming
`invalid_output`: the success/incomplete design's (a verdict, no scores, lenient booleans) and
the online-evaluation design's (the three scores and reasons, no verdict: the rules decide).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tracejudge.models.errors import TracejudgeError
from tracejudge.models.outputs import FailedStep

TOOL_NAME = "final_judge"
_TRUE = "true"


class InvalidAnswer(TracejudgeError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _to_bool(value: Any) -> bool | None:
    """The success/incomplete design's parser: true only for JSON true or the string "true"
    (any case, spaces stripped); anything else ("yes", "no", "", 0, a list) is false, never an
    error, so a sloppy boolean does not throw the judge's scores away. null is as if the key
    were absent: JSON's "no value" is not a "no"."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() == _TRUE
    return False


def _to_score(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("a boolean is not a score")
    if isinstance(value, str):
        value = value.strip()
        if not re.fullmatch(r"-?\d+(?:\.\d+)?", value):
            raise ValueError(f"not a number: {value!r}")
        value = float(value)
    if not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        # JSON numbers such as 1e999 parse to inf, and json.loads takes NaN and Infinity:
        # round() would raise OverflowError, which validation does not turn into an invalid
        # answer (it once escaped the client and left the breaker's probe hanging)
        raise ValueError(f"score {value} is not a finite number")
    score = round(value)
    if not 0 <= score <= 100:
        raise ValueError(f"score {score} outside 0-100")
    return score


def _to_str_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return [str(v) for v in value]
    raise ValueError("expected a list of strings")


class JudgeBlame(BaseModel):
    """The judge's `blame`: a step index (null: none named), who took it, why, how sure."""

    model_config = ConfigDict(extra="ignore")

    step_index: int | None = None
    actor: str | None = Field(default=None, max_length=256)
    reason: str = Field(default="", max_length=2000)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)

    @field_validator("step_index", mode="before")
    @classmethod
    def _index(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        if isinstance(value, bool) or (isinstance(value, int) and value < 0):
            return None
        return value


class JudgeAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # None: not given. The answer carries a verdict iff it gives `success` (see has_verdict);
    # with `success` but no `incomplete`, incomplete is false, as the success/incomplete
    # design's parser reads it. Without `success` it is scores only (the online-evaluation
    # design's shape) and the verdict is the rules'.
    success: bool | None = None
    incomplete: bool | None = None
    failed_steps: list[FailedStep] = Field(default_factory=list)
    remaining_steps: list[str] = Field(default_factory=list)
    summary: str = ""
    # Optional: the seed's answer shape has none; a verdict without all three keeps the rule
    # score as the overall score (and says so)
    correctness: int | None = None
    relevance: int | None = None
    actionability: int | None = None
    reasons: list[str] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list)
    # the step the judge holds responsible, when it names one; a malformed blame is dropped
    # (the rules' stands), never a reason to refuse the whole answer
    blame: JudgeBlame | None = None
    # a team's own dimensions (judges/llm/criteria.py), gathered from the keys this model does
    # not know; the client keeps only those the prompt asked for (`asked`)
    criteria_scores: dict[str, int] = Field(default_factory=dict)

    _bools = field_validator("success", "incomplete", mode="before")(_to_bool)

    @field_validator("blame", mode="before")
    @classmethod
    def _blame(cls, value: Any) -> Any:
        try:
            blame = JudgeBlame.model_validate(value) if isinstance(value, dict) else None
        except ValueError:
            return None
        return blame if blame is not None and blame.step_index is not None else None

    _scores = field_validator("correctness", "relevance", "actionability", mode="before")(_to_score)
    _lists = field_validator("remaining_steps", "reasons", "suggestions", mode="before")(
        _to_str_list
    )

    @field_validator("failed_steps", mode="before")
    @classmethod
    def _failed(cls, value: Any) -> Any:
        if value is None:
            return []
        if not isinstance(value, list):
            raise ValueError("failed_steps must be a list")
        steps = []
        for item in value:
            if not isinstance(item, dict):
                raise ValueError("each failed step must be an object")
            index = item.get("index")
            if isinstance(index, str) and index.strip().lstrip("-").isdigit():
                index = int(index)
            steps.append(
                {"index": index, "tool": item.get("tool"), "reason": str(item.get("reason") or "")}
            )
        return steps

    @model_validator(mode="after")
    def _verdict_or_scores(self) -> JudgeAnswer:
        if self.success is None:
            # an `incomplete` alone is half a verdict: taking it would pair the rules' success
            # and failed steps with the judge's incomplete, a verdict nobody gave. The rules'
            # verdict is taken whole instead (conclude says so in `reasons`)
            self.incomplete = None
        elif self.incomplete is None:
            self.incomplete = False  # the design's parser: a missing `incomplete` is false
        if self.success is None and self.llm_score is None:
            raise ValueError("neither a verdict (success) nor the three scores")
        return self

    @property
    def has_verdict(self) -> bool:
        """True iff the answer gave `success`: the one key both design shapes disagree on (the
        success/incomplete design's always has it, the online-evaluation design's never)."""
        return self.success is not None

    @property
    def llm_score(self) -> int | None:
        """The mean of the judge's three scores and the team's dimensions, each counted alike;
        None without all three."""
        scores = (self.correctness, self.relevance, self.actionability)
        if any(score is None for score in scores):
            return None
        given = [score for score in scores if score is not None]
        given += self.criteria_scores.values()
        return round(sum(given) / len(given))

    def asked(self, dimensions: tuple[str, ...]) -> JudgeAnswer:
        """The answer with only the team's dimensions the prompt asked for: a key the model
        added on its own is not a score anyone asked for."""
        kept = {k: v for k, v in self.criteria_scores.items() if k in dimensions}
        if kept == self.criteria_scores:
            return self
        return self.model_copy(update={"criteria_scores": kept})

    @model_validator(mode="before")
    @classmethod
    def _seed_shape(cls, value: Any) -> Any:
        """The seed's answer shape: camelCase keys, `failedSteps` items naming the tool (or the
        agent) as `aiName` and the reason as `reason`/`error`."""
        if not isinstance(value, dict):
            return value
        renamed = {_SEED_KEYS.get(k, k): v for k, v in value.items()}
        steps = renamed.get("failed_steps")
        if isinstance(steps, list):
            renamed["failed_steps"] = [
                {
                    "index": item.get("index", item.get("stepIndex", item.get("step"))),
                    "tool": item.get("tool", item.get("aiName", item.get("name"))),
                    "reason": item.get("reason", item.get("error", item.get("description"))),
                }
                if isinstance(item, dict)
                else item
                for item in steps
            ]
        extra = {
            k: v for k, v in renamed.items() if isinstance(k, str) and k not in cls.model_fields
        }
        if extra:
            renamed["criteria_scores"] = {**_dimension_scores(extra), **_given(renamed)}
        return renamed


def _given(value: dict[Any, Any]) -> dict[str, Any]:
    given = value.get("criteria_scores")
    return given if isinstance(given, dict) else {}


def _dimension_scores(extra: dict[str, Any]) -> dict[str, int]:
    """The keys of an answer that read as a score under a dimension's name; others are not
    scores (and dropped as before)."""
    scores = {}
    for name, value in extra.items():
        if not DIMENSION_NAME.fullmatch(name):
            continue
        try:
            score = _to_score(value)
        except ValueError:
            continue
        if score is not None:
            scores[name] = score
    return scores


_SEED_KEYS = {
    "failedSteps": "failed_steps",
    "remainingSteps": "remaining_steps",
    "failedStep": "failed_steps",
}
DIMENSION_NAME = re.compile(r"[a-z][a-z0-9_]{1,39}")  # a team's own score's key
_SENTRA = re.compile(r"<sentra-tools>(.*?)</sentra-tools>", re.DOTALL | re.IGNORECASE)
_INVOKE = re.compile(
    r"<invoke\s+name\s*=\s*[\"']([^\"']+)[\"']\s*>(.*?)</invoke>", re.DOTALL | re.IGNORECASE
)
_PARAM = re.compile(
    r"<parameter\s+name\s*=\s*[\"']([^\"']+)[\"']\s*>(.*?)</parameter>", re.DOTALL | re.IGNORECASE
)
_FENCE = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.DOTALL)


def parse_answer(response: dict[str, Any]) -> JudgeAnswer:
    """A Chat Completions response body -> JudgeAnswer, or InvalidAnswer saying why."""
    try:
        message = response["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise InvalidAnswer("response has no choices[0].message") from exc
    if not isinstance(message, dict):
        raise InvalidAnswer("choices[0].message is not an object")
    arguments = _from_tool_calls(message.get("tool_calls"))
    content = message.get("content")
    if arguments is None and isinstance(content, str):
        arguments = _from_sentra(content)
        if arguments is None:
            arguments = _from_json_content(content)
    if arguments is None:
        raise InvalidAnswer("no final_judge call, <sentra-tools> block or JSON object found")
    try:
        return JudgeAnswer.model_validate(arguments)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidAnswer(f"invalid final_judge arguments: {where}: {first['msg']}") from exc


def _from_tool_calls(tool_calls: Any) -> dict[str, Any] | None:
    if not isinstance(tool_calls, list):
        return None
    for call in tool_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or function.get("name") != TOOL_NAME:
            continue
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as exc:
                raise InvalidAnswer(f"final_judge arguments are not JSON: {exc.msg}") from exc
            except RecursionError as exc:  # an answer echoing deeply nested input
                raise InvalidAnswer("final_judge arguments are nested too deeply") from exc
        if not isinstance(arguments, dict):
            raise InvalidAnswer("final_judge arguments are not an object")
        return arguments
    return None


def _from_sentra(content: str) -> dict[str, Any] | None:
    for block in _SENTRA.findall(content):
        for name, body in _INVOKE.findall(block):
            if name.strip() != TOOL_NAME:
                continue
            arguments: dict[str, Any] = {}
            for param, raw in _PARAM.findall(body):
                text = raw.strip()
                try:
                    arguments[param.strip()] = json.loads(text)
                except (json.JSONDecodeError, RecursionError):
                    arguments[param.strip()] = text
            return arguments
    return None


def _from_json_content(content: str) -> dict[str, Any] | None:
    """The content is itself one JSON object (JSON-schema output, or a model that answers
    in JSON), bare or as the only thing in a code fence. A JSON object quoted inside prose is
    not an answer: the trace the model read may hold a forged verdict it is quoting."""
    text = content.strip()
    fenced = _FENCE.fullmatch(text)
    if fenced:
        text = fenced.group(1)
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    if value.get("name") == TOOL_NAME and isinstance(value.get("arguments"), dict):
        return dict(value["arguments"])
    return value
