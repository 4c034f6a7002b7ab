"""Failure modes from real instrumentation packages' spans (OpenInference for CrewAI, LangChain,
OpenAI and smolagents; openlit; pydantic-ai), recorded as their OTLP exporters sent them
(tests/data/otel), mapped by `tracejudge otel`'s mapping and judged by the worker's handlers:
a run that went well has no mode, a failing tool is named with its error, a crash is the run's
error, a loop names the call it repeats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.instrumentations import batches, events
from tracejudge.settings import Settings
from tracejudge.streams.replay.engine import replay

CAPTURES = sorted((Path(__file__).parent / "data" / "otel").glob("*.b64.gz"))


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name.split(".")[0])
async def test_a_captured_runs_mode_says_what_failed(capture: Path) -> None:
    found = events(batches(capture))
    records = [(e["request_id"].encode(), json.dumps(e).encode()) for e in found]
    result = await replay(Settings(redis_url=""), records)
    (evaluation,) = result.evaluations.values()
    mode: dict[str, Any] = evaluation.get("mode") or {}
    name = capture.name
    if "_ok" in name or "-ok" in name:
        assert not mode
    elif "tool_fails" in name:
        assert mode["kind"] == "tool_error" and mode["tool"] == "refund"
        assert "payment gateway timeout" in mode["name"] and mode["after"] == "get_order"
    elif "crash" in name:
        assert (mode["kind"], mode["rule"]) == ("rule", "run_error")
        assert mode["name"].startswith("the run ends in an error: ")
    else:
        assert "loop" in name and mode["kind"] == "rule"
