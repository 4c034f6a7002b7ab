"""Hand-written agent loop on the plain `openai` client, traced by OpenInference's OpenAI instrumentor.

    .venv-instrumented/oi_openai/bin/python tests/instrumented/oi_openai/agent.py SCENARIO OUTFILE

The model is scripted: an httpx MockTransport answering chat-completions JSON, so nothing leaves
the process. The whole run sits in one plain span `support-bot` opened with the provider's tracer,
unless NO_RUN_SPAN=1 (then each model call is its own trace).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Content capture: OpenInference records messages unless told to hide them (TraceConfig /
# OPENINFERENCE_HIDE_* env vars). Spelled out here so the setting is explicit.
for _var in (
    "OPENINFERENCE_HIDE_INPUTS",
    "OPENINFERENCE_HIDE_OUTPUTS",
    "OPENINFERENCE_HIDE_INPUT_MESSAGES",
    "OPENINFERENCE_HIDE_OUTPUT_MESSAGES",
    "OPENINFERENCE_HIDE_INPUT_TEXT",
    "OPENINFERENCE_HIDE_OUTPUT_TEXT",
    "OPENINFERENCE_HIDE_LLM_TOOLS",
    "OPENINFERENCE_HIDE_LLM_INVOCATION_PARAMETERS",
):
    os.environ.setdefault(_var, "false")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import capture
import httpx2 as httpx
import openai
from handloop import get_order, make_refund, run_agent, scripted_model
from openinference.instrumentation.openai import OpenAIInstrumentor


def main() -> int:
    scenario, out = sys.argv[1], sys.argv[2]
    assert scenario in capture.SCENARIOS, scenario
    provider = capture.tracer_provider(out, service="support-service")
    OpenAIInstrumentor().instrument(tracer_provider=provider)

    client = openai.OpenAI(
        api_key="test",
        base_url="http://127.0.0.1:9/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(scripted_model(scenario, httpx))),
    )
    tools = {"get_order": get_order, "refund": make_refund(scenario)}
    error = None
    try:
        if os.environ.get("NO_RUN_SPAN") == "1":
            answer = run_agent(client, tools)
        else:
            with provider.get_tracer("support-bot").start_as_current_span("support-bot"):
                answer = run_agent(client, tools)
        print(answer)
    except Exception as exc:  # after the run span ended (and recorded it)
        error = exc
    capture.finish(provider)
    if error is not None:
        print(f"run failed: {type(error).__name__}: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
