"""The hand-off of each fetched record from Faust's consumer to the streams, without four tasks.

faust-streaming 0.15 passes every record on with
`await consumer.wait_first(on_message(record), suspend_flow.wait())`: mode's `wait_first`
makes a task of each argument and of the consumer's stopped and crashed events, waits for the
first, and cancels the rest — about 50 µs a record on this machine, an eighth of what the
worker spends on an event. `on_message` almost never waits (it puts the event on a stream's
queue; it waits only while a rebalance holds the flow or the queue is full), so `wait_first`
here runs it inline up to its first wait and returns if it finished; only one that waits goes
the original way, racing the same events. Private state of faust-streaming (pinned < 0.16).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from mode.services import WaitResults

from tracejudge.streams.kafka import internals

WaitFirst = Callable[..., Awaitable[WaitResults]]


class _Continued:
    """A coroutine already started and now waiting on `waiting_on`, as an awaitable that
    carries it on (a task made of this drives the rest of it)."""

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self.coro, self.waiting_on = coro, waiting_on

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, waiting_on = self.coro, self.waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation, thrown into the coroutine
                try:
                    waiting_on = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    waiting_on = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


def inline_wait_first(original: WaitFirst, stopped: Callable[[], bool]) -> WaitFirst:
    """`original` (a service's `wait_first`), with its first coroutine run inline while it does
    not wait. `stopped`: whether the service stopped or crashed (then, like the original, the
    result says so)."""

    async def wait_first(*coros: Any, **options: Any) -> WaitResults:
        # only the hand-off's shape (`timeout=` is mode's one option); the rest as before
        shaped = len(coros) == 2 and options.get("timeout") is None
        if not (shaped and inspect.iscoroutine(coros[0])):
            return await original(*coros, **options)
        first, other = coros
        try:
            waiting_on = first.send(None)
        except StopIteration as stop:
            _close(other)
            # one record per turn of the loop, as the original paced it: handed over in
            # bulk, they filled the streams' queues up to their limit, which pauses fetching
            await asyncio.sleep(0)
            if stopped():
                return WaitResults([], [], True)
            return WaitResults([first], [stop.value], False)
        except BaseException:
            _close(other)
            raise
        return await original(_Continued(first, waiting_on), other)

    return wait_first


def _close(coro: Any) -> None:
    if inspect.iscoroutine(coro):  # never awaited: closed, so Python does not warn about it
        coro.close()


def install(consumer: Any) -> None:
    """Give Faust's consumer the inline hand-off (idempotent)."""
    internals.replace_wait_first(consumer, inline_wait_first)
