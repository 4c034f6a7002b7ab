"""A new producer's topic looked up again until its first delivery (client/transport.py
`_prime`), without a broker: started by the first event only, on a thread of its own, and ended
within its bound when no broker answers. Its effect on a real broker (the first events leave
without waiting 0.5-1 s for the producer id): tests/integration/test_intervention_client.py."""

from __future__ import annotations

import threading
import time

from tests.test_intervention_reader import dead_address
from tracejudge.client import Tracer
from tracejudge.client.transport import PRIME_LOOKUP_S, PRIME_S


def primers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tracejudge-client-prime"]


def test_the_first_event_starts_one_bounded_lookup_and_the_agent_never_waits() -> None:
    before = len(primers())
    tracer = Tracer(dead_address(), interventions=False, warn_interval_s=3600)
    try:
        assert len(primers()) == before  # made: nothing connects, nothing looked up
        started = time.monotonic()
        req = tracer.request("goal", agent_name="a")
        for i in range(20):
            req.reasoning(f"step {i}")
        assert time.monotonic() - started < 0.5  # handed over, never waited on
        assert len(primers()) == before + 1  # the first event's, and only one
        deadline = time.monotonic() + PRIME_S + PRIME_LOOKUP_S + 2.0
        while len(primers()) > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(primers()) == before  # given up within its bound: the broker is away
        assert tracer.sent == 0 and tracer.queued == 21  # the events wait, as before
    finally:
        tracer.close(0.1)
