"""The chat messages a model call's span carries, read into one shape whatever wrote them.

Instrumentations write a model call's messages in one of three ways:
- the OpenTelemetry GenAI conventions: `gen_ai.input.messages` / `gen_ai.output.messages`, JSON
  lists of `{"role", "parts": [...]}` where a part is `text` (`content`), `tool_call` (`id`,
  `name`, `arguments`) or `tool_call_response` (`id`, `response` or `result`); pydantic-ai
  writes the whole run's list as `pydantic_ai.all_messages` on its agent span. Older writers
  put OpenAI's shape in the same attributes (`content`, `tool_calls`, `tool_call_id`);
- OpenInference: flattened, `llm.input_messages.<i>.message.role` / `.content` /
  `.contents.<k>.message_content.text` / `.tool_calls.<j>.tool_call.id` / `.function.name` /
  `.function.arguments` / `.tool_call_id`;
- OpenLLMetry (and openlit's older output): flattened, `gen_ai.prompt.<i>.role` / `.content` /
  `.tool_calls.<j>.id|name|arguments` / `.tool_call_id`, and `gen_ai.completion.<i>.*`.

Everything here is bounded: at most MAX_MESSAGES messages and MAX_CALLS calls a message are
read, texts are clipped by the caller. Nothing raises on a value of an unexpected shape: what
cannot be read is left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_MESSAGES = 500
MAX_CALLS = 64
MAX_JSON = 4_000_000  # characters of a messages attribute parsed as JSON; more is not read


@dataclass
class Call:
    """A tool call the model asked for."""

    id: str | None
    name: str
    arguments: str | None  # JSON text, or the writer's own text


@dataclass
class Message:
    role: str  # user, assistant, system, tool (an instrumentation's own roles kept as written)
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    # a tool's answer: the call it answers (id), and its tool's name when the writer gives it
    answers: str | None = None
    answered_tool: str | None = None
    is_response: bool = False

    @property
    def is_assistant(self) -> bool:
        return self.role in ("assistant", "model", "ai")


def as_text(value: Any) -> str | None:
    """A value as text: strings as they are, anything else as compact JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("[", "{") and len(value) <= MAX_JSON:
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return None
    return value


def _genai_message(raw: Any) -> Message | None:
    if not isinstance(raw, Mapping):
        return None
    role = str(raw.get("role") or "")
    message = Message(role=role)
    texts: list[str] = []
    parts = raw.get("parts")
    if isinstance(parts, list):
        for part in parts[:MAX_CALLS]:
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            if kind == "text":
                texts.append(str(part.get("content") or ""))
            elif kind == "tool_call":
                message.calls.append(_call(part.get("id"), part))
            elif kind == "tool_call_response":
                message.is_response = True
                message.answers = _id(part.get("id"))
                message.answered_tool = _name(part.get("name"))
                response = part.get("response", part.get("result"))
                texts.append(as_text(response) or "")
    content = raw.get("content")
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):  # OpenAI's content parts
        texts.extend(
            str(p.get("text") or "") for p in content[:MAX_CALLS] if isinstance(p, Mapping)
        )
    calls = raw.get("tool_calls")
    for call in calls[:MAX_CALLS] if isinstance(calls, list) else []:
        if isinstance(call, Mapping):
            function = call.get("function")
            message.calls.append(
                _call(call.get("id"), function if isinstance(function, Mapping) else call)
            )
    if raw.get("tool_call_id") is not None:
        message.is_response = True
        message.answers = _id(raw.get("tool_call_id"))
        message.answered_tool = _name(raw.get("name"))
    if role == "tool":
        message.is_response = True
    message.text = "\n".join(t for t in texts if t)
    return message


def _call(id_: Any, function: Mapping[str, Any]) -> Call:
    return Call(
        _id(id_), str(function.get("name") or "tool")[:256], as_text(function.get("arguments"))
    )


def _id(value: Any) -> str | None:
    return str(value)[:256] if value not in (None, "") else None


def _name(value: Any) -> str | None:
    return str(value)[:256] if isinstance(value, str) and value else None


def genai_messages(value: Any) -> list[Message] | None:
    """A GenAI messages attribute (JSON text or a list), or None when it is not one."""
    parsed = _json(value)
    if isinstance(parsed, Mapping):  # one message, or `{"messages": [...]}`
        parsed = parsed.get("messages", [parsed])
    if not isinstance(parsed, list):
        return None
    found = [m for m in (_genai_message(raw) for raw in parsed[:MAX_MESSAGES]) if m is not None]
    return found or None


# `<prefix>.<i>.<rest>`: OpenInference's and OpenLLMetry's flattened messages
_FLAT = re.compile(r"(\d{1,4})\.(.+)")


def flat_messages(attributes: Mapping[str, Any], prefix: str) -> list[Message] | None:
    """Flattened messages under `prefix.` (OpenInference: `llm.input_messages`, with `message.`
    inside; OpenLLMetry: `gen_ai.prompt`, without)."""
    rows: dict[int, dict[str, Any]] = {}
    start = prefix + "."
    for key, value in attributes.items():
        if not key.startswith(start):
            continue
        found = _FLAT.fullmatch(key[len(start) :])
        if found is None:
            continue
        index = int(found.group(1))
        if index >= MAX_MESSAGES:
            continue
        rest = found.group(2).removeprefix("message.")
        rows.setdefault(index, {})[rest] = value
    if not rows:
        return None
    return [_flat_message(rows[i]) for i in sorted(rows)]


def _flat_message(row: Mapping[str, Any]) -> Message:
    message = Message(role=str(row.get("role") or ""))
    texts = [str(row["content"])] if isinstance(row.get("content"), str) else []
    calls: dict[int, dict[str, Any]] = {}
    contents: dict[int, str] = {}
    for key, value in row.items():
        if key.startswith("tool_calls."):
            found = _FLAT.fullmatch(key[len("tool_calls.") :])
            if found is not None and int(found.group(1)) < MAX_CALLS:
                rest = found.group(2).removeprefix("tool_call.")
                calls.setdefault(int(found.group(1)), {})[rest] = value
        elif key.startswith("contents.") and key.endswith(".message_content.text"):
            index = key.split(".")[1]
            if index.isdigit():
                contents[int(index)] = str(value)
    texts.extend(contents[i] for i in sorted(contents))
    for i in sorted(calls):
        call = calls[i]
        name = call.get("function.name") or call.get("name") or "tool"
        arguments = call.get("function.arguments", call.get("arguments"))
        message.calls.append(Call(_id(call.get("id")), str(name)[:256], as_text(arguments)))
    if row.get("tool_call_id") is not None:
        message.is_response = True
        message.answers = _id(row.get("tool_call_id"))
        message.answered_tool = _name(row.get("name"))
    if message.role == "tool":
        message.is_response = True
    message.text = "\n".join(t for t in texts if t)
    return message


INPUT_KEYS = ("gen_ai.input.messages", "pydantic_ai.all_messages")
OUTPUT_KEYS = ("gen_ai.output.messages",)
INPUT_PREFIXES = ("llm.input_messages", "gen_ai.prompt")
OUTPUT_PREFIXES = ("llm.output_messages", "gen_ai.completion")


def messages(attributes: Mapping[str, Any], output: bool) -> list[Message] | None:
    """A span's input (or output) messages, from whichever convention wrote them."""
    for key in OUTPUT_KEYS if output else INPUT_KEYS:
        if key in attributes:
            found = genai_messages(attributes[key])
            if found:
                return found
    for prefix in OUTPUT_PREFIXES if output else INPUT_PREFIXES:
        found = flat_messages(attributes, prefix)
        if found:
            return found
    return None


def last_user_text(found: list[Message]) -> str | None:
    """What the user asked last: the last user message with text (a tool's answer that a
    writer files under `user`, as pydantic-ai does, is not one)."""
    for message in reversed(found):
        if message.role in ("user", "human") and not message.is_response and message.text:
            return message.text
    return None


def answer_text(found: list[Message]) -> str | None:
    """The model's words in its last message, when it said something (not only tool calls)."""
    for message in reversed(found):
        if message.is_assistant or message.role == "":
            return message.text or None
    return None


@dataclass
class Answered:
    """A tool call read from messages, with what the tool answered."""

    call: Call
    response: str | None
    failure: str | None = None  # the failure's text, when the trace says the call failed


def new_tool_calls(found: list[Message]) -> list[Answered]:
    """The tool calls a model call's input answers for the first time: the tool answers after
    the last assistant message, matched to that message's calls by id (else in order). Each
    model call's input repeats the run's history, and only its tail is new: reading just the
    tail counts every call once."""
    last = max((i for i, m in enumerate(found) if m.is_assistant), default=None)
    if last is None:
        return []
    asked = found[last].calls
    answers = [m for m in found[last + 1 :] if m.is_response]
    by_id = {c.id: c for c in asked if c.id}
    done: list[Answered] = []
    unmatched = list(asked)
    for answer in answers:
        call = by_id.get(answer.answers or "")
        if call is None and answer.answers is None and unmatched:  # no ids: in order
            call = unmatched[0]
        if call is None and answer.answered_tool:  # its call is not in the input: by name
            call = Call(answer.answers, answer.answered_tool, None)
        if call is None:
            continue
        if call in unmatched:
            unmatched.remove(call)
        done.append(Answered(call, answer.text))
    return done


# A ReAct turn as agents write it in text (CrewAI, LangChain's and LlamaIndex's ReAct agents):
# the action, its input, and the observation the framework appended
_REACT = re.compile(
    r"Action:[ \t]*([^\n]{1,256})\n[ \t]*Action Input:[ \t]*"
    r"([^\n]*(?:\n(?!Observation:)[^\n]*){0,40})\n?[ \t]*Observation:[ \t]*(.*)",
    re.DOTALL,
)
REACT_TEXT_LIMIT = 20_000  # characters of one message searched for a ReAct turn


def react_call(text: str) -> Answered | None:
    """The tool call and observation of one ReAct turn written in text, if it is one."""
    found = _REACT.search(text[:REACT_TEXT_LIMIT])
    if found is None:
        return None
    name, arguments, observed = (g.strip() for g in found.groups())
    # the observation's first paragraph: frameworks append their instructions after it
    observed = observed.split("\n\n\n", 1)[0].strip()
    return Answered(Call(None, name.strip("'\"`")[:256], arguments or None), observed)


def run_calls(found: list[Message]) -> list[Answered]:
    """Every tool call a run's whole message list holds, in order, each with its tool's
    answer: calls answered by tool messages (by id, else in order), and ReAct turns written
    in an assistant's text."""
    done: list[Answered] = []
    waiting: list[Call] = []
    for message in found:
        if message.is_assistant:
            waiting = list(message.calls)
            turn = react_call(message.text) if not message.calls and message.text else None
            if turn is not None:
                done.append(turn)
        elif message.is_response:
            call = next((c for c in waiting if c.id and c.id == message.answers), None)
            if call is None and waiting and message.answers is None:
                call = waiting[0]
            if call is None and message.answered_tool:
                call = Call(message.answers, message.answered_tool, None)
            if call is None:
                continue
            if call in waiting:
                waiting.remove(call)
            done.append(Answered(call, message.text))
    return done
