"""Circuit breaker: opens after consecutive failures, lets one probe through after a cool-down."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    def __init__(
        self,
        failure_threshold: int,
        cooldown_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> State:
        if self._opened_at is None:
            return "closed"
        if self._probing or self._clock() - self._opened_at >= self.cooldown_s:
            return "half_open"
        return "open"

    def allow(self) -> bool:
        """May a call go out now? In half-open state only one probe at a time."""
        return self.admit() is not None

    def admit(self) -> Literal["call", "probe"] | None:
        """Like `allow`, saying whether the call admitted is the half-open state's probe: its
        caller must end it with `record_success`, `record_failure` or `release_probe`, whatever
        happens (a probe never ended keeps the breaker half-open until restart)."""
        state = self.state
        if state == "closed":
            return "call"
        if state == "half_open" and not self._probing:
            self._probing = True
            return "probe"
        return None

    def release_probe(self) -> None:
        """The probe ended without saying anything about the server (cancelled, a per-request
        error, our own bug): the next call may probe again."""
        self._probing = False

    def record_success(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._probing = False

    def record_failure(self) -> None:
        self._failures += 1
        if self._probing or self._failures >= self.failure_threshold:
            self._opened_at = self._clock()
        self._probing = False
