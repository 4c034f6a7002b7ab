"""What a span is and says, in each instrumentation's own words.

Instrumentations name the same things differently; each reader here tries them in turn:
- the OpenTelemetry GenAI conventions (`gen_ai.operation.name`, `gen_ai.agent.name`,
  `gen_ai.tool.*`, `gen_ai.usage.*`), as the official instrumentations, pydantic-ai (and so
  Logfire) and openlit write them;
- OpenInference (Phoenix): `openinference.span.kind` (AGENT, CHAIN, LLM, TOOL, ...),
  `input.value` / `output.value`, `tool.name`, `llm.model_name`, `llm.token_count.*`,
  `agent.name`, `metadata` (a JSON object: LangChain's `lc_agent_name`);
- OpenLLMetry (traceloop-sdk): `traceloop.span.kind` (workflow, agent, task, tool),
  `traceloop.entity.name` / `.input` / `.output`, `llm.request.type`.
Framework wrappers are unwrapped where they hide what a user reads: a tool's `{"args": [],
"kwargs": {...}}`, smolagents' `{"task": ...}` run arguments, LangChain's serialised messages.

Pure and bounded: a value is read only up to MAX_VALUE characters; JSON deeper than the
standard library takes is left as text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from tracejudge.client.otel_messages import (
    Answered,
    Message,
    answer_text,
    as_text,
    genai_messages,
    last_user_text,
    messages,
    run_calls,
)

MAX_VALUE = 1_000_000  # characters of one attribute parsed as JSON
UNKNOWN_SERVICE = "unknown_service"  # the SDK's default service.name, e.g. unknown_service:python

AGENT, TOOL, MODEL, CHAIN, OTHER = "agent", "tool", "model", "chain", "other"
_BY_OPERATION = {
    "invoke_agent": AGENT,
    "create_agent": AGENT,
    "execute_tool": TOOL,
    "chat": MODEL,
    "text_completion": MODEL,
    "generate_content": MODEL,
    "embeddings": MODEL,
}
_BY_OPENINFERENCE = {"AGENT": AGENT, "TOOL": TOOL, "LLM": MODEL, "CHAIN": CHAIN}
_BY_TRACELOOP = {"workflow": AGENT, "agent": AGENT, "tool": TOOL, "task": CHAIN}
# a model call's span without any message or usage is a framework's helper, not a call
# (LlamaIndex's `_prepare_chat_with_tools`, kind LLM)
_MODEL_EVIDENCE = (
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.token_count.",
    "gen_ai.usage.",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.prompt.",
    "gen_ai.completion.",
)
# the pseudo-tools by which a framework's agent hands over its answer (smolagents'
# `final_answer`, pydantic-ai's output tool `final_result`): the answer, not a tool call
# (compared without underscores, lower case: `FinalAnswer`, `final_answer`)
FINAL_ANSWER_TOOLS = frozenset({"finalanswer", "finalresult"})
# attributes that hold message content: present, the trace has content to read
CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "pydantic_ai.all_messages",
    "final_result",
    "input.value",
    "output.value",
    "traceloop.entity.input",
    "traceloop.entity.output",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "tool_arguments",
    "tool_response",
)
CONTENT_PREFIXES = (
    "llm.input_messages.",
    "llm.output_messages.",
    "gen_ai.prompt.",
    "gen_ai.completion.",
)


def role_of(attributes: Mapping[str, Any], name: str, failed: bool = False) -> str:
    """agent, tool, model, chain (a framework's wrapper: not a step) or other (not the
    agent's: HTTP, database, retrieval)."""
    op = attributes.get("gen_ai.operation.name")
    if isinstance(op, str) and op in _BY_OPERATION:
        return _BY_OPERATION[op]
    kind = attributes.get("openinference.span.kind")
    if isinstance(kind, str) and kind:
        role = _BY_OPENINFERENCE.get(kind.upper(), OTHER)
        if role == MODEL and not failed and not _has_prefix(attributes, _MODEL_EVIDENCE):
            return CHAIN
        return role
    kind = attributes.get("traceloop.span.kind")
    if isinstance(kind, str) and kind:
        return _BY_TRACELOOP.get(kind, OTHER)
    if isinstance(attributes.get("llm.request.type"), str):  # OpenLLMetry's model calls
        return MODEL
    return _BY_OPERATION.get(name.split(" ", 1)[0], OTHER)


def _has_prefix(attributes: Mapping[str, Any], prefixes: tuple[str, ...]) -> bool:
    return any(key.startswith(prefixes) for key in attributes)


def has_content(attributes: Mapping[str, Any]) -> bool:
    """The span carries message content (whether or not it is read)."""
    return any(key in attributes for key in CONTENT_KEYS) or _has_prefix(
        attributes, CONTENT_PREFIXES
    )


def convention_of(attributes: Mapping[str, Any]) -> str | None:
    """Which convention a span is written in, for the receiver's log."""
    if "openinference.span.kind" in attributes:
        return "openinference"
    if "traceloop.span.kind" in attributes or "llm.request.type" in attributes:
        return "openllmetry"
    if any(key.startswith("gen_ai.") for key in attributes):
        return "genai"
    return None


def _short(value: Any, limit: int = 256) -> str | None:
    return value[:limit] if isinstance(value, str) and value.strip() else None


def _metadata(attributes: Mapping[str, Any]) -> Mapping[str, Any]:
    """OpenInference's `metadata`: a JSON object as text."""
    raw = attributes.get("metadata")
    if isinstance(raw, str) and raw.startswith("{") and len(raw) <= MAX_VALUE:
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError):
            return {}
        return parsed if isinstance(parsed, Mapping) else {}
    return {}


def own_agent_name(attributes: Mapping[str, Any]) -> str | None:
    """The agent a span names by attribute: GenAI's `gen_ai.agent.name`, OpenInference's
    `agent.name`, pydantic-ai's `agent_name`, an OpenLLMetry agent's entity name, LangChain's
    `lc_agent_name` in OpenInference's metadata."""
    for key in ("gen_ai.agent.name", "agent.name", "agent_name"):
        found = _short(attributes.get(key))
        if found:
            return found
    if attributes.get("traceloop.span.kind") in ("agent", "workflow"):
        found = _short(attributes.get("traceloop.entity.name"))
        if found:
            return found
    if "metadata" in attributes:
        return _short(_metadata(attributes).get("lc_agent_name"))
    return None


def agent_name_of(attributes: Mapping[str, Any], name: str, role: str) -> str | None:
    """The agent an agent span stands for: its attributes, else its span name
    (`invoke_agent support-bot`, smolagents' `support_bot.run`, CrewAI's
    `support-bot._execute_core`); for other spans, their attributes only."""
    found = own_agent_name(attributes)
    if found or role != AGENT:
        return found
    words = name.split(" ", 1)
    if len(words) == 2 and words[0] in ("invoke_agent", "create_agent"):
        return _short(words[1])
    if name in ("agent run", "invoke_agent"):  # pydantic-ai's unnamed run
        return None
    return _short(name.split(".", 1)[0]) if "." in name else _short(name)


# LlamaIndex's agent workflows name the agent only inside the events their steps record
_CURRENT_AGENT = re.compile(r"current_agent_name='([^'\n]{1,256})'")


def wrapped_agent_name(attributes: Mapping[str, Any]) -> str | None:
    """The agent a framework's wrapper span names inside its recorded input or output."""
    for key in ("input.value", "output.value"):
        value = attributes.get(key)
        if isinstance(value, str) and "current_agent_name=" in value:
            found = _CURRENT_AGENT.search(value[:MAX_VALUE])
            if found:
                return found.group(1)
    return None


_GENERIC_ROOTS = frozenset({"LangGraph", "RunnableSequence", "AgentExecutor", "Workflow"})
_PLAIN_NAME = re.compile(r"[A-Za-z][\w-]{0,127}")


def root_name_as_agent(name: str) -> str | None:
    """A root span's name as the agent's, when it reads like one: the span a team opens
    around its run (`with tracer.start_as_current_span("support-bot")`) or a named graph, not
    a framework's method (`FunctionAgent.run`) or default name (`LangGraph`)."""
    if _PLAIN_NAME.fullmatch(name) and name not in _GENERIC_ROOTS:
        return name
    return None


def service_name(resource: Mapping[str, Any]) -> str | None:
    found = _short(resource.get("service.name"))
    return None if found is None or found.startswith(UNKNOWN_SERVICE) else found


def _parsed(value: Any) -> Any:
    """JSON text as its value (an object, a list, or a string a writer JSON-quoted, as
    OpenLLMetry's decorators record a function's string result); other text as it is."""
    if isinstance(value, str) and value[:1] in ("{", "[", '"') and len(value) <= MAX_VALUE:
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _unwrap_call(value: Any) -> Any:
    """`{"args": [...], "kwargs": {...}}` (a Python call's arguments as OpenInference and
    OpenLLMetry record them) as the arguments a user reads."""
    if (
        isinstance(value, Mapping)
        and "kwargs" in value
        and set(value)
        <= {
            "args",
            "kwargs",
            "sanitize_inputs_outputs",
            "self",
        }
    ):
        args = value.get("args") or []
        kwargs = value.get("kwargs") or {}
        if not args:
            return kwargs
        if not kwargs and isinstance(args, list) and len(args) == 1:
            return args[0]
        return {"args": args, **kwargs} if isinstance(kwargs, Mapping) else value
    return value


def arguments_text(value: Any) -> str | None:
    """A tool's arguments, unwrapped, as compact JSON (identical calls read identically)."""
    if value is None:
        return None
    return as_text(_unwrap_call(_parsed(value)))


# keys under which frameworks put the user's request in a run's arguments or state
_TASK_KEYS = ("task", "input", "user_msg", "user_prompt", "query", "question", "prompt", "goal")
# keys under which frameworks put a run's answer in its output object
_ANSWER_KEYS = ("final_output", "output", "answer", "raw", "result", "response", "content")


def _lc_message(raw: Any) -> tuple[str, str] | None:
    """(role, text) of a message as LangChain serialises it (`{"type": "ai", "data": {...}}`,
    `{"lc": 1, "kwargs": {...}}`), OpenAI's (`{"role", "content"}`) or a (role, text) pair."""
    if isinstance(raw, list) and len(raw) == 2 and all(isinstance(x, str) for x in raw):
        return raw[0], raw[1]
    if not isinstance(raw, Mapping):
        return None
    body = raw.get("data") if isinstance(raw.get("data"), Mapping) else raw.get("kwargs")
    body = body if isinstance(body, Mapping) else raw
    role = str(body.get("type") or raw.get("type") or body.get("role") or "")
    content = body.get("content")
    if isinstance(content, list):
        content = " ".join(
            str(p.get("text") or "") for p in content if isinstance(p, Mapping)
        ).strip()
    return (role, content) if isinstance(content, str) else None


_USER_ROLES = ("user", "human", "HumanMessage")
_AI_ROLES = ("ai", "assistant", "AIMessage", "AIMessageChunk")


def _from_messages(value: Any, roles: tuple[str, ...]) -> str | None:
    if not isinstance(value, list):
        return None
    for raw in reversed(value[-500:]):
        found = _lc_message(raw)
        if found is not None and found[0] in roles and found[1].strip():
            return found[1]
    return None


def task_text(value: Any) -> str | None:
    """The user's request in a run's input: plain text, or the request inside the wrapper a
    framework records (run arguments, a state with messages)."""
    parsed = _unwrap_call(_parsed(value))
    if isinstance(parsed, str):
        return parsed if parsed.strip() else None
    if isinstance(parsed, list):
        return _from_messages(parsed, _USER_ROLES)
    if isinstance(parsed, Mapping):
        for key in _TASK_KEYS:
            if isinstance(parsed.get(key), str) and parsed[key].strip():
                return str(parsed[key])
        if "messages" in parsed:
            return _from_messages(parsed["messages"], _USER_ROLES)
    return None


# a Python object's repr (`StopEvent(result=...)`): what a framework's wrapper span records
# when it has no text to give, never an answer
_REPR = re.compile(r"[A-Z]\w{0,80}\(\w{1,80}=")


def answer_of(value: Any) -> str | None:
    """A run's answer in its output: plain text, or the answer inside the object a framework
    records (CrewAI's `raw`, a state's last AI message)."""
    parsed = _parsed(value)
    if isinstance(parsed, str):
        return parsed if parsed.strip() and not _REPR.match(parsed) else None
    if isinstance(parsed, list):
        return _from_messages(parsed, _AI_ROLES)
    if isinstance(parsed, Mapping):
        for key in _ANSWER_KEYS:
            inner = parsed.get(key)
            if isinstance(inner, str) and inner.strip() and not _REPR.match(inner):
                return inner
        if "messages" in parsed:
            found = _from_messages(parsed["messages"], _AI_ROLES)
            if found:
                return found
        if isinstance(parsed.get("data"), Mapping):  # one LangChain message
            message = _lc_message(parsed)
            return message[1] if message and message[1].strip() else None
    return None


def result_text(value: Any) -> tuple[str | None, bool]:
    """A tool's result as a user reads it, and whether the result itself says it failed
    (LlamaIndex's `is_error`, LangChain's tool message `status: error`)."""
    parsed = _parsed(value)
    if isinstance(parsed, str):
        return parsed, False
    if isinstance(parsed, Mapping):
        failed = parsed.get("is_error") is True
        data = parsed.get("data")
        if isinstance(data, Mapping) and "content" in data:  # a LangChain ToolMessage
            return as_text(data.get("content")), failed or data.get("status") == "error"
        if "raw_output" in parsed:  # a LlamaIndex ToolOutput
            return as_text(parsed.get("raw_output")), failed
    return (None if value is None else as_text(value)), False


def goal_of(attributes: Mapping[str, Any]) -> str | None:
    """What a run span says it was asked: its messages' last user text, or its input."""
    found = messages(attributes, output=False)
    if found:
        text = last_user_text(found)
        if text:
            return text
    for key in ("input.value", "traceloop.entity.input", "gen_ai.prompt"):
        if key in attributes:
            text = task_text(attributes[key])
            if text:
                return text
    tasks = _parsed(attributes.get("crew_tasks"))  # CrewAI's crew: the tasks it was given
    if isinstance(tasks, list):
        said = [
            str(t["description"])
            for t in tasks[:20]
            if isinstance(t, Mapping) and t.get("description")
        ]
        return "\n".join(said) or None
    return None


def run_steps(attributes: Mapping[str, Any]) -> list[Answered]:
    """The tool calls an agent span's own output lists, for instrumentations that give a
    run's messages there and no span per tool (OpenInference's CrewAI: the task's output
    holds its messages, ReAct turns in text or tool calls, and `tool_failures`)."""
    output = _parsed(attributes.get("output.value"))
    if not isinstance(output, Mapping):
        return []
    found: list[Message] = genai_messages(output.get("messages")) or []
    done = run_calls(found)
    failures = output.get("tool_failures")
    failed: dict[str, list[str]] = {}  # tool -> its failures' texts, in order
    for failure in failures[:100] if isinstance(failures, list) else []:
        if not isinstance(failure, Mapping):
            continue
        said = failure.get("failure") if isinstance(failure.get("failure"), Mapping) else {}
        assert isinstance(said, Mapping)
        text = ": ".join(str(p) for p in (said.get("code"), said.get("message")) if p)
        failed.setdefault(str(failure.get("tool_name") or ""), []).append(text or "error")
    for step in done:
        texts = failed.get(step.call.name)
        if texts and step.failure is None and failed_answer(step.response):
            step.failure = texts[0] if len(texts) == 1 else texts.pop(0)
    return done


# a tool answer that reads as a failure, where the answer is all a trace gives (a hand-written
# loop's tool message, a ReAct observation): an error type or word first ("Error: ...",
# "RuntimeError: ...", "Traceback ..."), a JSON object with an error, or what agent frameworks
# write in the observation when a tool raised or a call was refused
_FAILED_ANSWER = re.compile(
    r"\s*(?:\{\s*\"error\"\s*:\s*(?!null|\"\"|false)|(?:\w+(?:Error|Exception)|error|exception|"
    r"traceback|failed|failure)\b|I encountered an error while trying to use the tool|"
    r"I tried reusing the same input)",
    re.IGNORECASE,
)


def failed_answer(text: str | None) -> bool:
    return bool(text) and _FAILED_ANSWER.match(text or "") is not None


def final_of(attributes: Mapping[str, Any]) -> str | None:
    """What a run span says it answered: pydantic-ai's `final_result`, its output messages'
    text, or its output."""
    if _short(attributes.get("final_result"), 10**9):
        return str(attributes["final_result"])
    found = messages(attributes, output=True)
    if found:
        text = answer_text(found)
        if text:
            return text
    for key in ("output.value", "traceloop.entity.output", "gen_ai.completion"):
        if key in attributes:
            text = answer_of(attributes[key])
            if text:
                return text
    return None


def raw_input(attributes: Mapping[str, Any]) -> str | None:
    for key in ("input.value", "traceloop.entity.input"):
        if isinstance(attributes.get(key), str) and attributes[key].strip():
            return str(attributes[key])
    return None


def first_of(attributes: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = attributes.get(key)
        if value not in (None, ""):
            return value
    return None
