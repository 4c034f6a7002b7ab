"""Scripted LlamaIndex FunctionAgent traced by OpenInference's LlamaIndex instrumentor.

    .venv-instrumented/oi_llama_index/bin/python tests/instrumented/oi_llama_index/agent.py SCENARIO OUTFILE

The model is a minimal `FunctionCallingLLM` subclass that replays a script: tool calls travel
in `additional_kwargs["tool_calls"]` (OpenAI-style dicts, as llama-index-llms-openai keeps them)
and `get_tool_calls_from_response` turns them into `ToolSelection`s. No network: NLTK and
tiktoken are pointed at the caches bundled inside llama-index-core, and every socket connect
or DNS lookup raises.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Content capture: OpenInference records everything unless told to hide it; state it anyway.
for _var in (
    "OPENINFERENCE_HIDE_INPUTS",
    "OPENINFERENCE_HIDE_OUTPUTS",
    "OPENINFERENCE_HIDE_INPUT_MESSAGES",
    "OPENINFERENCE_HIDE_OUTPUT_MESSAGES",
    "OPENINFERENCE_HIDE_INPUT_TEXT",
    "OPENINFERENCE_HIDE_OUTPUT_TEXT",
):
    os.environ[_var] = "false"

# Offline: no hub downloads; tiktoken/NLTK caches are set after importing llama_index.core.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _no_network(*_args: Any, **_kwargs: Any) -> Any:
    raise OSError("network disabled in the scripted agent")


socket.socket.connect = _no_network  # type: ignore[method-assign]
socket.socket.connect_ex = _no_network  # type: ignore[method-assign]
socket.create_connection = _no_network  # type: ignore[assignment]
socket.getaddrinfo = _no_network  # type: ignore[assignment]

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import capture
import llama_index.core

# llama-index-core ships cl100k_base (tiktoken) and NLTK stopwords/punkt_tab under _static/
_static = Path(llama_index.core.__file__).resolve().parent / "_static"
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(_static / "tiktoken_cache"))
os.environ.setdefault("NLTK_DATA", str(_static / "nltk_cache"))

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.tools import FunctionTool
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

SCENARIO = sys.argv[1]
OUTFILE = sys.argv[2]
assert SCENARIO in capture.SCENARIOS, SCENARIO


def _call(n: int, name: str) -> dict:
    return {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps({"order_id": 7})},
    }


def _script(scenario: str) -> list:
    """One entry per model call: a list of tool calls, a final text, or an exception."""
    if scenario == "ok":
        return [[_call(1, "get_order")], [_call(2, "refund")], "Refunded 20 EUR for order 7."]
    if scenario == "tool_fails":
        return [
            [_call(1, "get_order")],
            [_call(2, "refund")],
            "I could not refund order 7: the payment gateway timed out.",
        ]
    if scenario == "loop":
        return [[_call(i + 1, "get_order")] for i in range(capture.LOOP_CALLS)] + [
            "I could not tell."
        ]
    if scenario == "crash":
        return [[_call(1, "get_order")], RuntimeError("model backend unavailable")]
    raise ValueError(scenario)


class ScriptedLLM(FunctionCallingLLM):
    """Replays `script`; answers non-streaming and streaming chat alike (FunctionAgent streams)."""

    script: list = []
    turn: int = 0

    @classmethod
    def class_name(cls) -> str:
        return "ScriptedLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            model_name="scripted-model", is_chat_model=True, is_function_calling_model=True
        )

    def _next(self) -> ChatResponse:
        step = self.script[self.turn]
        self.turn += 1
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, str):
            msg = ChatMessage(role=MessageRole.ASSISTANT, content=step)
        else:
            msg = ChatMessage(
                role=MessageRole.ASSISTANT, content="", additional_kwargs={"tool_calls": step}
            )
        usage = {
            "prompt_tokens": 50 + 10 * self.turn,
            "completion_tokens": 12,
            "total_tokens": 62 + 10 * self.turn,
        }
        return ChatResponse(
            message=msg,
            raw={"model": "scripted-model", "usage": usage},
            additional_kwargs=usage,  # where llama-index-llms-openai puts token counts
        )

    # --- the FunctionCallingLLM surface FunctionAgent uses ---
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: Any | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(
                user_msg
                if isinstance(user_msg, ChatMessage)
                else ChatMessage(role="user", content=user_msg)
            )
        return {
            "messages": messages,
            "tools": [t.metadata.to_openai_tool() for t in tools],
            **kwargs,
        }

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        calls = response.message.additional_kwargs.get("tool_calls") or []
        if not calls and error_on_no_tool_call:
            raise ValueError("expected a tool call")
        return [
            ToolSelection(
                tool_id=c["id"],
                tool_name=c["function"]["name"],
                tool_kwargs=json.loads(c["function"]["arguments"]),
            )
            for c in calls
        ]

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._next()

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._next()

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any):
        response = self._next()

        def gen():
            yield ChatResponse(
                message=response.message,
                delta=response.message.content,
                raw=response.raw,
                additional_kwargs=response.additional_kwargs,
            )

        return gen()

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any):
        response = self._next()

        async def gen():
            yield ChatResponse(
                message=response.message,
                delta=response.message.content,
                raw=response.raw,
                additional_kwargs=response.additional_kwargs,
            )

        return gen()

    # completion API: unused by the agent, required by the abstract base
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise NotImplementedError

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
        raise NotImplementedError

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        raise NotImplementedError

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
        raise NotImplementedError


def get_order(order_id: int) -> dict:
    """Look up an order by its id."""
    return {"order_id": 7, "amount_eur": 20, "status": "paid"}


def refund(order_id: int) -> str:
    """Refund an order by its id."""
    if SCENARIO == "tool_fails":
        raise RuntimeError("payment gateway timeout")
    return "refunded 20 EUR for order 7"


async def run_agent() -> Any:
    agent = FunctionAgent(
        name="support-bot",
        description="Handles refunds for customer orders.",
        system_prompt="You are a customer support agent. Use the tools to handle the request.",
        tools=[FunctionTool.from_defaults(get_order), FunctionTool.from_defaults(refund)],
        llm=ScriptedLLM(script=_script(SCENARIO)),
    )
    # default max_iterations is 20: the loop scenario (7 model calls) is not cut
    return await agent.run(user_msg=capture.TASK, max_iterations=20)


def main() -> int:
    provider = capture.tracer_provider(OUTFILE, service="support-service")
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    error: BaseException | None = None
    try:
        result = asyncio.run(run_agent())
        print(str(result))
    except Exception as exc:  # the crash scenario: spans have ended by now
        error = exc
    capture.finish(provider)
    if error is not None:
        print(f"run failed: {type(error).__name__}: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
