from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

from tests.cli import run_cli
from tracejudge.models.json_schemas import SCHEMA_DIR, contract_schemas, render_schema
from tracejudge.models.outputs import (
    Alert,
    EarlyStopDecision,
    Evaluation,
    ReflectionRequest,
    RetryRequest,
    Usage,
)
from tracejudge.settings import Settings
from tracejudge.streams.demo.samples import sample_traces
from tracejudge.streams.replay.engine import replay


def test_published_schemas_are_current() -> None:
    for name, schema in contract_schemas().items():
        path = SCHEMA_DIR / name
        assert path.read_text(encoding="utf-8") == render_schema(schema), (
            f"{path} is stale: run `tracejudge schema --out models/schemas`"
        )


def test_sample_events_validate_against_the_published_event_schema() -> None:
    schema = json.loads((SCHEMA_DIR / "event.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for trace in sample_traces("schema"):
        for event in trace.events:
            validator.validate(event)
    bad = {
        "type": "tool_call",
        "request_id": "r",
        "step_index": "one",
        "tool": "x",
        "success": True,
    }
    assert list(validator.iter_errors(bad))


def test_every_setting_is_in_the_help_of_a_command_that_reads_it() -> None:
    top = run_cli("--help").stdout
    assert "TRACEJUDGE_KAFKA_BOOTSTRAP" not in top and "exit codes:" in top  # commands list theirs
    assert len(top.splitlines()) < 40
    worker = run_cli("worker", "--help").stdout
    assert all(f"TRACEJUDGE_{name.upper()}" in worker for name in Settings.model_fields)
    show = run_cli("show", "--help").stdout
    assert "TRACEJUDGE_REDIS_URL" in show and "TRACEJUDGE_LLM_MODEL" not in show
    assert "--config FILE" in show and "exit codes:" in show


def test_config_is_accepted_after_the_command_too(tmp_path: Path) -> None:
    bad = tmp_path / "bad.env"
    bad.write_text("TRACEJUDGE_PARTITIONS=many\n")
    for args in (["--config", str(bad), "schema"], ["schema", "--config", str(bad)]):
        result = run_cli(*args)
        assert result.returncode == 2 and "TRACEJUDGE_PARTITIONS" in result.stderr, args


def test_settings_from_a_file_and_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracejudge.settings import load_settings

    config = tmp_path / "tracejudge.env"
    config.write_text("TRACEJUDGE_WARN_THRESHOLD=75\nTRACEJUDGE_TOPIC_PREFIX=acme.\n")
    monkeypatch.delenv("TRACEJUDGE_WARN_THRESHOLD", raising=False)
    settings = load_settings(str(config))
    assert settings.warn_threshold == 75 and settings.topic("events") == "acme.events"
    monkeypatch.setenv("TRACEJUDGE_WARN_THRESHOLD", "40")
    assert load_settings(str(config)).warn_threshold == 40


def test_bad_configuration_is_one_clear_line(tmp_path: Path) -> None:
    result = run_cli("--config", str(tmp_path / "missing.env"), "schema")
    assert result.returncode == 2 and "config file not found" in result.stderr
    import os

    env = {**os.environ, "TRACEJUDGE_PARTITIONS": "zero"}
    result = run_cli("schema", env=env)
    assert result.returncode == 2 and "partitions" in result.stderr.lower()


def test_docker_compose_matches_the_tested_kafka_and_settings() -> None:
    import re

    from tracejudge.settings import Settings

    root = Path(__file__).resolve().parent.parent
    compose = (root / "docker-compose.yml").read_text()
    pom = (root / "scripts" / "kafka" / "pom.xml").read_text()
    version = re.search(r"<kafka.version>(.+?)</kafka.version>", pom)
    assert version and f"image: apache/kafka:{version.group(1)}" in compose
    known = {f"TRACEJUDGE_{name.upper()}" for name in Settings.model_fields}
    used = set(re.findall(r"\b(TRACEJUDGE_[A-Z_]+)\b", compose))
    assert used and used <= known
    assert 'KAFKA_AUTO_CREATE_TOPICS_ENABLE: "false"' in compose


def with_newer_fields(value: Any) -> Any:
    """`value` as a newer tracejudge might publish it: a field added to every object in it."""
    if isinstance(value, dict):
        return {**{k: with_newer_fields(v) for k, v in value.items()}, "added_later": {"x": 1}}
    if isinstance(value, list):
        return [with_newer_fields(v) for v in value]
    return value


@pytest.fixture(scope="module")
def published() -> dict[str, tuple[type[BaseModel], dict[str, Any]]]:
    """One of each output as the worker publishes it, with every nested object present."""
    events = [e for t in sample_traces("compat") for e in t.events]
    records = [(e["request_id"].encode(), json.dumps(e).encode()) for e in events]
    result = asyncio.run(replay(Settings(redis_url=""), records))
    evaluation = next(e for e in result.evaluations.values() if e["failed_steps"] and e["findings"])
    # the samples report no model usage: give it one, so that object is read too
    usage = Usage(model_calls=1, input_tokens=900, output_tokens=40, models=["gpt-4o"])
    evaluation = {**evaluation, "usage": usage.model_dump(mode="json")}
    retry = RetryRequest(retry_id="t", session_id="s", attempt=1, response_type="generic", ts=1.0)
    stop = EarlyStopDecision(
        decision_id="d", request_id="r", iteration=3, action="stop", reason="conclusion",
        evidence="CONCLUSION: done", ts=1.0,
    )  # fmt: skip
    return {
        "evaluation": (Evaluation, evaluation),
        "reflection_request": (ReflectionRequest, result.reflections[0]),
        "alert": (Alert, result.alerts[0]),
        "retry_request": (RetryRequest, retry.model_dump(mode="json")),
        "early_stop": (EarlyStopDecision, stop.model_dump(mode="json")),
    }


@pytest.mark.parametrize(
    "name", ["evaluation", "reflection_request", "alert", "retry_request", "early_stop"]
)
def test_an_output_with_fields_from_a_newer_version_is_read_and_validates(
    name: str, published: dict[str, tuple[type[BaseModel], dict[str, Any]]]
) -> None:
    model, value = published[name]
    newer = with_newer_fields(value)
    # a reader on this version keeps what it knows, and what it writes is still the schema
    assert model.model_validate_json(json.dumps(newer)).model_dump(mode="json") == value
    # a consumer validating with the published schema accepts the newer output too
    schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors(newer))
    broken = {**newer, "ts": "yesterday"}  # the schema still checks the fields it names
    assert list(validator.iter_errors(broken))
