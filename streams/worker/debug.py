"""Where every coroutine of the worker is waiting: GET /debug/tasks, for diagnosing stalls."""

from __future__ import annotations

import asyncio
import gc
import inspect
from typing import Any


def _chain(coro: Any, values: bool = True) -> list[str]:
    """Where `coro` waits, outermost first; `values`: the repr of what it awaits last (a
    future's repr can hold data in flight)."""
    lines = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            code = frame.f_code
            lines.append(f"    {code.co_filename}:{frame.f_lineno} {code.co_name}")
        nxt = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
        if nxt is not None and not hasattr(nxt, "cr_frame") and not hasattr(nxt, "ag_frame"):
            if values:
                lines.append(f"    awaiting {nxt!r}"[:300])
            break
        coro = nxt
    return lines


def async_stacks(values: bool = True) -> str:
    """Await chains of all tasks, then of the coroutines and async generators defined inside
    of the app factory (an agent's `async for` is only visible this way). `values=False`: code
    locations only, safe for a log."""
    lines = []
    for task in asyncio.all_tasks():
        lines.append(f"--- task {task.get_name()}")
        lines += _chain(task.get_coro(), values)
    for obj in gc.get_objects():
        is_async = inspect.iscoroutine(obj) or inspect.isasyncgen(obj)
        if is_async and "create_app" in obj.__qualname__:
            lines.append(f"=== {obj.__qualname__}")
            lines += _chain(obj, values)
    return "\n".join(lines)
