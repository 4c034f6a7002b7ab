"""Spans as real instrumentations wrote them in settings the live tests do not run (recorded
once from the real packages by tests/instrumented/<family>/agent.py, kept gzipped in
tests/data/otel/): other instrumentation versions, modes and semantic-convention switches of
the same four runs, each judged as a reader of its trace would.

- CrewAI with native tool calls (`native_`) and OpenInference's event-listener mode (`el_`),
  where tool and model calls are spans; its refused repeats, its aborted loop;
- LangChain's deprecated `create_react_agent` (`legacy_`: an AGENT node named "agent" under
  the named graph), OpenInference's GenAI attributes on (`genai_`), and a tool error LangGraph
  re-raises (`raise_`);
- OpenInference's OpenAI and smolagents instrumentors with GenAI attributes on (smolagents then
  writes the tool's schema as `gen_ai.tool.call.arguments`), smolagents with a model class the
  instrumentor does not wrap (no model spans);
- openlit with the HTTP client's own spans under each model call (ignored);
- pydantic-ai's instrumentation versions 2, 3, 4 and 6 (5, the default, runs live).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.instrumentations import batches, judged

DATA = Path(__file__).resolve().parent / "data" / "otel"
OK = [("get_order", True), ("refund", True)]
REFUND_FAILS = [("get_order", True), ("refund", False)]


@dataclass(frozen=True)
class Expected:
    passed: bool
    success: bool | None  # None: what the trace lets no reader decide
    calls: list[tuple[str, bool]] | None = None
    rules: tuple[str, ...] = ()  # findings the verdict must have
    agent: str = "support-bot"
    closed_by: str = "final_response"


CASES = {
    "oi_crewai-native_ok": Expected(True, True, OK),
    "oi_crewai-native_tool_fails": Expected(False, False, REFUND_FAILS, ("unrecovered_failure",)),
    # CrewAI stops a run that repeats a call five times: an error that ends it
    "oi_crewai-native_loop": Expected(
        False, False, [("get_order", True)] * 5, ("identical_call_loop", "run_error")
    ),
    "oi_crewai-native_crash": Expected(False, False, [("get_order", True)], ("run_error",)),
    "oi_crewai-el_ok": Expected(True, True, OK),
    # ReAct mode retries a raising tool three times, each a failed span
    "oi_crewai-el_tool_fails": Expected(
        False, False, [("get_order", True)] + [("refund", False)] * 3, ("unrecovered_failure",)
    ),
    # the repeats CrewAI refused have no span: only the first call shows
    "oi_crewai-el_loop": Expected(True, True, [("get_order", True)]),
    "oi_crewai-el_crash": Expected(False, False, [("get_order", True)], ("run_error",)),
    "oi_crewai-native_el_ok": Expected(True, True, OK),
    "oi_crewai-native_el_tool_fails": Expected(
        False, False, REFUND_FAILS, ("unrecovered_failure",)
    ),
    # the aborted run's crew span is never exported: the request goes quiet
    "oi_crewai-native_el_loop": Expected(
        False, None, [("get_order", True)] * 5, ("identical_call_loop",), "", "idle_timeout"
    ),
    "oi_crewai-native_el_crash": Expected(False, False, [("get_order", True)], ("run_error",)),
    "oi_langchain-legacy_ok": Expected(True, True, OK),
    "oi_langchain-legacy_tool_fails": Expected(
        False, False, REFUND_FAILS, ("unrecovered_failure",)
    ),
    "oi_langchain-legacy_crash": Expected(False, False, [("get_order", True)], ("run_error",)),
    "oi_langchain-genai_ok": Expected(True, True, OK),
    "oi_langchain-genai_crash": Expected(False, False, [("get_order", True)], ("run_error",)),
    "oi_langchain-raise_tool_fails": Expected(False, False, REFUND_FAILS, ("run_error",)),
    "oi_openai-tool_fails-genai": Expected(False, False, REFUND_FAILS, ("unrecovered_failure",)),
    "oi_openai-crash-genai": Expected(False, False, [("get_order", True)], ("run_error",)),
    "oi_smolagents-tool_fails_genai": Expected(
        False, False, REFUND_FAILS, ("unrecovered_failure",), "support_bot"
    ),
    "oi_smolagents-ok_unexported_model": Expected(True, True, OK, agent="support_bot"),
    "openlit-http-ok": Expected(True, True, OK),
    "openlit-http-crash": Expected(False, False, [], ("run_error",)),
    **{
        f"pydantic_ai-v{v}-{run}": Expected(
            run == "ok",
            run == "ok",
            OK if run == "ok" else REFUND_FAILS,
            () if run == "ok" else ("unrecovered_failure",),
        )
        for v in (2, 3, 4, 6)
        for run in ("ok", "tool_fails")
    },
}


def test_every_recorded_shape_has_its_expectation() -> None:
    assert sorted(p.name.removesuffix(".b64.gz") for p in DATA.glob("*.b64.gz")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_recorded_shape_gets_the_verdict_a_reader_gives(name: str) -> None:
    expected = CASES[name]
    run = judged(batches(DATA / f"{name}.b64.gz"))
    verdict = run.only
    assert verdict["closed_by"] == expected.closed_by
    if expected.agent:
        assert verdict["agent_name"] == expected.agent
    assert verdict["passed"] is expected.passed
    if expected.success is not None:
        assert verdict["success"] is expected.success
    if expected.calls is not None:
        assert [(c["tool"], c["success"]) for c in run.steps("tool_call")] == expected.calls
    found = {f["rule"] for f in verdict["findings"]}
    assert set(expected.rules) <= found, found
    if not expected.passed and "unrecovered_failure" in expected.rules:
        [refund] = [c for c in run.steps("tool_call") if not c["success"]][-1:]
        assert "payment gateway timeout" in refund["error"]
