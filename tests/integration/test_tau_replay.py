"""Replay real tau-bench airline runs (tests/data/tau_airline) through a worker on the real
broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis.asyncio as aioredis

from tests.integration.harness import (
    WorkerProcess,
    consume,
    key_value_lines,
    produce,
    worker_env,
)
from tracejudge.models.json_schemas import SCHEMA_DIR

pytestmark = pytest.mark.integration


def request_ids(path: Path) -> set[str]:
    return {json.loads(line)["request_id"] for line in path.read_text().splitlines() if line}


async def test_replay_gives_one_valid_evaluation_per_run_also_in_redis(
    kafka_bootstrap: str, redis_url: str, tau_events: Path, tmp_path: Path
) -> None:
    worker = WorkerProcess(
        worker_env(kafka_bootstrap, redis_url, tmp_path, "tau"), tmp_path / "worker.log"
    ).start()
    try:
        expected = request_ids(tau_events)
        assert len(expected) >= 20  # the vendored subset: 40 whole runs
        await produce(kafka_bootstrap, worker.topic("events"), key_value_lines(tau_events))
        records = await consume(
            kafka_bootstrap,
            worker.topic("evaluations"),
            until=lambda rs: len(rs) >= len(expected),
            timeout_s=120,
            settle_s=2.0,
        )
    finally:
        worker.stop()
    evaluations: list[dict[str, Any]] = [json.loads(r.value) for r in records]
    assert len(evaluations) == len(expected)
    assert {e["request_id"] for e in evaluations} == expected
    assert len({e["evaluation_id"] for e in evaluations}) == len(expected)
    schema = json.loads((SCHEMA_DIR / "evaluation.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for evaluation in evaluations:
        validator.validate(evaluation)
    redis = aioredis.from_url(redis_url)
    try:
        for evaluation in evaluations:
            stored = await redis.get(f"tracejudge:evaluation:{evaluation['request_id']}")
            assert stored is not None and json.loads(stored) == evaluation
    finally:
        await redis.aclose()
