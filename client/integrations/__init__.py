"""Integrations with the frameworks agents are built with. Each imports its framework only when
it is imported itself: the client does not depend on any of them.

- `otel.TracejudgeSpanProcessor`: any OpenTelemetry-instrumented agent, in-process.
- `langchain.TracejudgeCallbackHandler`: LangChain and LangGraph.
- `openai_agents.TracejudgeProcessor`: the OpenAI Agents SDK's own tracing.
"""
