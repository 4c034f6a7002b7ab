"""An OpenTelemetry-instrumented agent judged in its own process: GenAI spans go to tracejudge
through `TracejudgeSpanProcessor`, no collector needed.

    TRACEJUDGE_KAFKA_BOOTSTRAP=127.0.0.1:PORT python -m examples.otel_agent
    python -m examples.otel_agent --bootstrap 127.0.0.1:PORT

The spans are what GenAI instrumentation emits for one run: invoke_agent > chat, execute_tool.
"""

from __future__ import annotations

import sys

from opentelemetry.sdk.trace import TracerProvider

from examples._common import parser, report, tracer
from tracejudge.client.integrations.otel import TracejudgeSpanProcessor


def main(argv: list[str] | None = None) -> int:
    options = parser("examples.otel_agent", __doc__).parse_args(argv)
    judged = tracer(options)
    provider = TracerProvider()
    provider.add_span_processor(TracejudgeSpanProcessor(judged))
    otel = provider.get_tracer("support-bot")
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support-bot"}
    with otel.start_as_current_span("invoke_agent support-bot", attributes=agent) as root:
        with otel.start_as_current_span(
            "chat gpt-4o-mini",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 640,
                "gen_ai.usage.output_tokens": 22,
            },
        ):
            pass  # the model decided to look the order up
        with otel.start_as_current_span(
            "execute_tool get_order",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_order"},
        ):
            pass  # the tool ran
    provider.force_flush()
    return report(judged, f"otel-{root.get_span_context().trace_id:032x}", options.bootstrap)


if __name__ == "__main__":
    sys.exit(main())
