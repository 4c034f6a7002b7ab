"""One CrewAI run of the support-bot story, traced by OpenInference's CrewAI instrumentor.

    .venv-instrumented/oi_crewai/bin/python tests/instrumented/oi_crewai/agent.py SCENARIO OUTFILE

The model is a scripted subclass of CrewAI's `BaseLLM`. `BaseLLM` has no
`supports_function_calling()`, so CrewAI drives such a model with its ReAct text protocol
("Thought/Action/Action Input" ... "Final Answer:"), and that is what the script answers.
Variants for comparison (not the default): OI_CREWAI_NATIVE=1 makes the model claim native
function calling and answer OpenAI-style tool calls; OI_CREWAI_EVENT_LISTENER=1 instruments with
`use_event_listener=True` (the instrumentor's event-bus mode, which also makes LLM spans).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

# No network, no CrewAI telemetry/tracing. Must be set before crewai is imported.
# NOT OTEL_SDK_DISABLED: the OpenTelemetry SDK reads it too and would turn OUR provider
# into a no-op (crewai_core.telemetry.Telemetry._is_telemetry_disabled honours
# CREWAI_DISABLE_TELEMETRY / CREWAI_DISABLE_TRACKING as well).
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"  # anonymous usage telemetry (telemetry.crewai.com)
os.environ["CREWAI_DISABLE_TRACKING"] = "true"  # same switch, second spelling
os.environ["CREWAI_TRACING_ENABLED"] = "false"  # CrewAI AMP trace upload / first-run trace prompt
os.environ["CREWAI_TESTING"] = "true"  # no interactive prompts
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # litellm is not installed; harmless
os.environ["HOME"] = os.environ.get("OI_CREWAI_HOME", "/tmp/oi_crewai_home")  # crewai user data
# OpenInference content capture (TraceConfig reads these; all default to "false" = capture).
for _var in (
    "OPENINFERENCE_HIDE_INPUTS",
    "OPENINFERENCE_HIDE_OUTPUTS",
    "OPENINFERENCE_HIDE_INPUT_MESSAGES",
    "OPENINFERENCE_HIDE_OUTPUT_MESSAGES",
    "OPENINFERENCE_HIDE_INPUT_TEXT",
    "OPENINFERENCE_HIDE_OUTPUT_TEXT",
):
    os.environ[_var] = "false"

NETWORK_ATTEMPTS: list[str] = []
_orig_connect = socket.socket.connect


def _no_connect(self: socket.socket, address: Any) -> None:  # pragma: no cover - guard
    if self.family == getattr(socket, "AF_UNIX", None):
        return _orig_connect(self, address)
    NETWORK_ATTEMPTS.append(repr(address))
    raise OSError(f"network disabled in this test: {address!r}")


socket.socket.connect = _no_connect  # type: ignore[method-assign]

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import capture
from crewai import Agent, Crew, Process, Task
from crewai.llms.base_llm import BaseLLM, llm_call_context
from crewai.tools import tool
from openinference.instrumentation.crewai import CrewAIInstrumentor

NATIVE = os.environ.get("OI_CREWAI_NATIVE") == "1"
EVENT_LISTENER = os.environ.get("OI_CREWAI_EVENT_LISTENER") == "1"
SCENARIO = sys.argv[1] if len(sys.argv) > 1 else "ok"
TOOL_RUNS: list[str] = []  # every real execution of a tool body, for the stderr summary


@tool("get_order")
def get_order(order_id: int) -> dict:
    """Look up an order by its id."""
    TOOL_RUNS.append(f"get_order({order_id})")
    return {"order_id": 7, "amount_eur": 20, "status": "paid"}


@tool("refund")
def refund(order_id: int) -> str:
    """Refund an order by its id."""
    TOOL_RUNS.append(f"refund({order_id})")
    if SCENARIO == "tool_fails":
        raise RuntimeError("payment gateway timeout")
    return "refunded 20 EUR for order 7"


def _script(scenario: str) -> list[Any]:
    """The model's turns: ("tool", name, args) or ("final", text) or ("raise", message)."""
    get = ("tool", "get_order", {"order_id": 7})
    ref = ("tool", "refund", {"order_id": 7})
    if scenario == "ok":
        return [get, ref, ("final", "Refunded 20 EUR for order 7.")]
    if scenario == "tool_fails":
        return [get, ref, ("final", "I could not refund order 7: the payment gateway timed out.")]
    if scenario == "loop":
        return [get] * capture.LOOP_CALLS + [("final", "I could not tell.")]
    if scenario == "crash":
        return [get, ("raise", "model backend unavailable")]
    raise SystemExit(f"unknown scenario {scenario!r}; expected one of {capture.SCENARIOS}")


class ScriptedLLM(BaseLLM):
    """A deterministic model: plays its script one turn per call, like a provider would."""

    turns: list[Any] = []
    calls: int = 0
    log: list[Any] = []

    def call(
        self,
        messages: Any,
        tools: list[dict[str, Any]] | None = None,
        callbacks: list[Any] | None = None,
        available_functions: dict[str, Any] | None = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> Any:
        with llm_call_context():  # as CrewAI's own providers do: one call_id per call
            return self._call(
                messages, tools, callbacks, available_functions, from_task, from_agent
            )

    def _call(
        self,
        messages: Any,
        tools: list[dict[str, Any]] | None,
        callbacks: list[Any] | None,
        available_functions: dict[str, Any] | None,
        from_task: Any,
        from_agent: Any,
    ) -> Any:
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        # What a real provider does: started event, then completed (with usage) or failed.
        self._emit_call_started_event(
            messages=messages,
            tools=tools,
            callbacks=callbacks,
            available_functions=available_functions,
            from_task=from_task,
            from_agent=from_agent,
        )
        index = self.calls
        self.calls += 1
        self.log.append({"call": index, "n_messages": len(messages), "tools": bool(tools)})
        turn = self.turns[index] if index < len(self.turns) else self.turns[-1]
        if turn[0] == "raise":
            error = RuntimeError(turn[1])
            self._emit_call_failed_event(str(error), from_task=from_task, from_agent=from_agent)
            raise error
        usage = {
            "prompt_tokens": 100 + 10 * index,
            "completion_tokens": 20,
            "total_tokens": 120 + 10 * index,
        }
        self._track_token_usage_internal(usage)
        response: Any
        if turn[0] == "final":
            response = (
                turn[1]
                if NATIVE
                else f"Thought: I now know the final answer\nFinal Answer: {turn[1]}"
            )
        elif NATIVE and tools:
            response = [
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": turn[1], "arguments": json.dumps(turn[2])},
                }
            ]
        else:
            response = (
                f"Thought: I should call {turn[1]}.\n"
                f"Action: {turn[1]}\n"
                f"Action Input: {json.dumps(turn[2])}"
            )
        from crewai.events.types.llm_events import LLMCallType

        self._emit_call_completed_event(
            response=response,
            call_type=LLMCallType.TOOL_CALL if isinstance(response, list) else LLMCallType.LLM_CALL,
            from_task=from_task,
            from_agent=from_agent,
            messages=messages,
            usage=usage,
            finish_reason="tool_calls" if isinstance(response, list) else "stop",
            response_id=f"resp_{index}",
        )
        return response

    def supports_function_calling(self) -> bool:
        return NATIVE

    def get_context_window_size(self) -> int:
        return 128000


def main() -> int:
    if len(sys.argv) != 3 or SCENARIO not in capture.SCENARIOS:
        print(f"usage: agent.py {{{','.join(capture.SCENARIOS)}}} OUTFILE", file=sys.stderr)
        return 2
    provider = capture.tracer_provider(sys.argv[2], service="support-service")
    if EVENT_LISTENER:
        CrewAIInstrumentor().instrument(tracer_provider=provider, use_event_listener=True)
    else:
        CrewAIInstrumentor().instrument(tracer_provider=provider)

    llm = ScriptedLLM(model="scripted-model", turns=_script(SCENARIO))
    agent = Agent(
        role="support-bot",
        goal="Resolve customer support requests such as refunds.",
        backstory="You are the support bot of a small web shop.",
        tools=[get_order, refund],
        llm=llm,
        allow_delegation=False,
        max_iter=10,
        verbose=False,
    )
    task = Task(
        description=capture.TASK,
        expected_output="A one-sentence answer for the customer.",
        agent=agent,
    )
    crew = Crew(
        agents=[agent], tasks=[task], process=Process.sequential, verbose=False, tracing=False
    )
    error: BaseException | None = None
    try:
        result = crew.kickoff()
        print(f"final: {result.raw}")
    except Exception as exc:  # the crash scenario: the run's spans have ended by now
        error = exc
    print(f"model calls: {llm.calls}; tool bodies run: {TOOL_RUNS}", file=sys.stderr)
    capture.finish(provider)
    if error is not None:
        print(f"run failed: {type(error).__name__}: {error}", file=sys.stderr)
    if NETWORK_ATTEMPTS:
        print(f"BLOCKED NETWORK ATTEMPTS: {NETWORK_ATTEMPTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
