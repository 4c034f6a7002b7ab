"""A scripted OpenAI-compatible Chat Completions server on loopback, in its own thread.

The script is a function from (request body, call number) to a Reply, so each test decides
status, headers, delay and body; every request received is recorded.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.realservices import free_port
from tracejudge.judges.llm.answer import TOOL_NAME


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict -> JSON; str -> raw text
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


Script = Callable[[dict[str, Any], int], Reply]


def completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


def tool_call_reply(arguments: dict[str, Any] | str, **kw: Any) -> Reply:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(
        body=completion(
            {
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": TOOL_NAME, "arguments": args},
                    }
                ],
            }
        ),
        **kw,
    )


def content_reply(content: str, **kw: Any) -> Reply:
    return Reply(body=completion({"content": content}), **kw)


def sentra(arguments: dict[str, Any]) -> str:
    params = "".join(
        f'<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v)}</parameter>'
        for k, v in arguments.items()
    )
    return f'<sentra-tools><invoke name="{TOOL_NAME}">{params}</invoke></sentra-tools>'


def verdict(success: bool, incomplete: bool, score: int = 80, **extra: Any) -> dict[str, Any]:
    return {
        "success": success,
        "incomplete": incomplete,
        "summary": "scripted verdict",
        "correctness": score,
        "relevance": score,
        "actionability": score,
        "remaining_steps": ["finish it"] if incomplete else [],
        **extra,
    }


def data_block(body: dict[str, Any]) -> str:
    """The text between <data> and </data> of the user message."""
    content = body["messages"][1]["content"]
    start = content.index("<data>\n") + len("<data>\n")
    return str(content[start : content.rindex("\n</data>")])


class FakeLLM:
    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda body, n: tool_call_reply(verdict(True, False)))
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.port = free_port()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeLLM:
        self._thread.start()
        assert self._ready.wait(10), "fake LLM server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            n = len(self.requests)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            reply = self.script(body, n)
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            if isinstance(reply.body, str):
                return web.Response(status=reply.status, text=reply.body, headers=reply.headers)
            return web.json_response(reply.body or {}, status=reply.status, headers=reply.headers)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
