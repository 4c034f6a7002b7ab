"""Hand-written agent loop on the plain `openai` client, traced by the official OpenTelemetry
GenAI instrumentation (`opentelemetry-instrumentation-openai-v2`, built on `opentelemetry-util-genai`).

    .venv-instrumented/genai_official/bin/python tests/instrumented/genai_official/agent.py SCENARIO OUTFILE

The model is scripted: an httpx MockTransport answering chat-completions JSON, so nothing leaves
the process. The whole run sits in one plain span `support-bot` opened with the provider's tracer,
unless NO_RUN_SPAN=1 (then each model call is its own trace). The tools get no span (the loop is
hand-written; this instrumentation only wraps `chat.completions.create`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Content capture, as the package documents it (opentelemetry.instrumentation.openai_v2 docstring):
# opt into the latest GenAI conventions and put message content on SPANS. Must be set before
# instrument(): the TelemetryHandler reads the capture mode when it is built. (With
# opentelemetry-util-genai>=1.0 the opt-in is no longer read at all: `is_experimental_mode()`
# always returns True, so the handler path is taken either way; the legacy value "true" is then
# rejected with a warning and means NO_CONTENT.)
os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import capture
import httpx
import openai
from handloop import get_order, make_refund, run_agent, scripted_model
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor


def main() -> int:
    scenario, out = sys.argv[1], sys.argv[2]
    assert scenario in capture.SCENARIOS, scenario
    provider = capture.tracer_provider(out, service="support-service")
    # Only spans are captured: SPAN_ONLY writes no log events, so no logger provider is needed.
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
