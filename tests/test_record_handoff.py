"""The inline hand-off of fetched records (record_handoff.py) keeps mode's `wait_first`
semantics: results, waiting, cancellation, errors, a stopped service."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from mode import Service

from tracejudge.streams.worker.record_handoff import inline_wait_first, install


class Consumer(Service):
    pass


def handoff() -> tuple[Consumer, list[int]]:
    consumer = Consumer()
    calls: list[int] = []
    original = consumer.wait_first

    async def counted(*coros: Any, **options: Any) -> Any:
        calls.append(len(coros))
        return await original(*coros, **options)

    consumer.wait_first = counted  # type: ignore[method-assign]
    install(consumer)
    install(consumer)  # idempotent
    return consumer, calls


async def test_a_callback_that_does_not_wait_runs_inline_and_closes_the_other() -> None:
    consumer, calls = handoff()
    flow = asyncio.Event()
    seen: list[int] = []

    async def on_message(n: int) -> int:
        seen.append(n)
        return n * 2

    for n in range(100):
        other = flow.wait()
        result = await consumer.wait_first(on_message(n), other)
        assert (result.results, result.stopped) == ([n * 2], False)
        # closed, never awaited (Python would warn of it)
        assert inspect.getcoroutinestate(other) == inspect.CORO_CLOSED
    assert seen == list(range(100)) and calls == []


async def test_a_callback_that_waits_is_carried_on_by_the_original() -> None:
    consumer, calls = handoff()
    queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
    queue.put_nowait(0)  # full: the next put waits
    flow = asyncio.Event()

    async def on_message(n: int) -> str:
        await queue.put(n)
        return f"put {n}"

    async def drain_later() -> None:
        await asyncio.sleep(0.05)
        assert queue.get_nowait() == 0

    drained = asyncio.ensure_future(drain_later())
    result = await consumer.wait_first(on_message(7), flow.wait())
    await drained
    assert result.results == ["put 7"] and queue.get_nowait() == 7
    assert calls == [2]


async def test_when_the_other_wins_the_waiting_callback_is_cancelled() -> None:
    consumer, _ = handoff()
    flow = asyncio.Event()
    cleaned: list[str] = []

    async def on_message() -> None:
        try:
            await asyncio.Event().wait()  # waits for ever
        finally:
            cleaned.append("cancelled")

    asyncio.get_running_loop().call_later(0.05, flow.set)
    result = await consumer.wait_first(on_message(), flow.wait())
    await asyncio.sleep(0)  # the cancellation reaches the callback
    assert result.results == [True] and cleaned == ["cancelled"]


async def test_errors_come_out_whether_raised_at_once_or_after_waiting() -> None:
    consumer, _ = handoff()

    async def at_once() -> None:
        raise ValueError("bad record")

    async def after_waiting() -> None:
        await asyncio.sleep(0.01)
        raise KeyError("later")

    with pytest.raises(ValueError, match="bad record"):
        await consumer.wait_first(at_once(), asyncio.Event().wait())
    with pytest.raises(KeyError, match="later"):
        await consumer.wait_first(after_waiting(), asyncio.Event().wait())


async def test_a_stopped_consumer_says_so() -> None:
    stopped = [False]

    async def original(*coros: Any, **options: Any) -> Any:
        raise AssertionError("not reached: the callback finished inline")

    wait_first = inline_wait_first(original, lambda: stopped[0])

    async def on_message() -> int:
        return 1

    assert not (await wait_first(on_message(), asyncio.Event().wait())).stopped
    stopped[0] = True
    assert (await wait_first(on_message(), asyncio.Event().wait())).stopped
