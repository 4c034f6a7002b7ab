"""JSON Schemas of the contract, so agents in any language can validate what they send."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from tracejudge.models.events import CONTRACT_VERSION, EVENT_ADAPTER
from tracejudge.models.modes import ModeAlert
from tracejudge.models.outputs import (
    Alert,
    EarlyStopDecision,
    Evaluation,
    Intervention,
    ReflectionRequest,
    RetryRequest,
)
from tracejudge.models.responses import ModelResponse
from tracejudge.models.sessions import SessionVerdict

SCHEMA_DIR = Path(__file__).parent / "schemas"


def contract_schemas() -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema, for the input event and every output event."""
    event = EVENT_ADAPTER.json_schema(mode="validation")
    event["title"] = f"tracejudge event (contract v{CONTRACT_VERSION})"
    event["description"] = (
        "One event per Kafka message on <prefix>events, key = request_id. Unknown fields are "
        "dropped; summaries and previews over 2,000 characters and goal/output over 8,000 are "
        "clipped and flagged in `clipped`."
    )
    schemas = {"event.schema.json": event}
    for name, model in (
        ("model_response", ModelResponse),
        ("evaluation", Evaluation),
        ("reflection_request", ReflectionRequest),
        ("alert", Alert),
        ("retry_request", RetryRequest),
        ("early_stop", EarlyStopDecision),
        ("intervention", Intervention),
        ("session_verdict", SessionVerdict),
        ("mode_alert", ModeAlert),
    ):
        adapter: TypeAdapter[Any] = TypeAdapter(model)
        schemas[f"{name}.schema.json"] = (
            adapter.json_schema(mode="validation")
            if model is ModelResponse
            else adapter.json_schema(mode="serialization")
        )
    for schema in schemas.values():
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schemas


def render_schema(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def write_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in contract_schemas().items():
        path = directory / name
        path.write_text(render_schema(schema), encoding="utf-8")
        written.append(path)
    return written
