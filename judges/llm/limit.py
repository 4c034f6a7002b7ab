"""Calls in flight per worker, adapting to the server: an AIMD limit (as Netflix's
concurrency-limits `AIMDLimit`). Each answered call raises it by 1/limit (about one a round of
calls) up to the configured concurrency; each pushback (429, 503) cuts it by `BACKOFF`, never
below one. A pushback is the server asking to slow down, not a failure: the breaker never
hears of it."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

# Netflix's default ratio: several pushbacks at once (every call in flight gets one) cut the
# limit a few times, e.g. 8 calls hit together bring 8 down to 3, not to 1
BACKOFF = 0.9


class AdaptiveLimit:
    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self.current = float(maximum)
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def slots(self) -> int:
        return max(1, int(self.current))

    async def acquire(self) -> None:
        """Wait for a slot, first come first served; the caller bounds the wait."""
        if self.in_flight < self.slots and not self._waiters:
            self.in_flight += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # `_wake` counts the slot in before waking us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as the wait ended: give it back
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def on_success(self) -> None:
        self.current = min(float(self.maximum), self.current + 1 / self.current)
        self._wake()

    def on_pushback(self) -> None:
        self.current = max(1.0, self.current * BACKOFF)

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.slots:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)


@dataclass(frozen=True)
class TokenReservation:
    """Tokens taken from a per-minute token budget before a call (`client.TokenLimiter`), to be
    corrected to what the call spent."""

    minute: int
    tokens: int
    shared: bool  # taken from the count shared by every worker; else from this process's own
