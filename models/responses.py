"""Contract of `tracejudge.responses` (key = session_id): one model answer per message."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError

from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import LONG_TEXT_LIMIT, _Event, decode_object, describe


class ModelResponse(_Event):
    TEXT_LIMITS: ClassVar[dict[str, int]] = {"prompt": LONG_TEXT_LIMIT, "response": LONG_TEXT_LIMIT}
    type: Literal["model_response"]
    request_id: str | None = Field(default=None, max_length=256)  # type: ignore[assignment]
    session_id: str = Field(min_length=1, max_length=256)
    agent: str | None = Field(default=None, max_length=256)
    prompt: str
    response: str
    attempt: int = Field(default=0, ge=0, description="0 for the first answer, n for retry n.")


def parse_model_response(
    raw: bytes | str | dict[str, Any] | None, max_bytes: int | None = None
) -> ModelResponse:
    value = decode_object(raw, max_bytes)
    if value.get("type") != "model_response":
        raise InvalidEvent("unknown_type", f"expected type model_response, got {value['type']!r}")
    try:
        return ModelResponse.model_validate(value)
    except ValidationError as exc:
        raise InvalidEvent("invalid_fields", describe(exc)) from exc
