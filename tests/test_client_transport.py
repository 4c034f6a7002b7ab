"""The client with no broker to talk to (a closed loopback port): it never raises into the agent,
never waits, drops the newest event past its bound and counts it, and warns once per interval."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator

import pytest

from tracejudge.client import AsyncTracer, Tracer
from tracejudge.client.transport import kafka_config


@pytest.fixture
def nowhere() -> Iterator[str]:
    """A loopback port bound and never listened on: connections are refused, and no other
    process can take the port while the test runs."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{held.getsockname()[1]}"


def test_a_tracer_made_while_no_broker_answers_records_without_raising(nowhere: str) -> None:
    tracer = Tracer(nowhere, queue_size=1000)
    with tracer.traced("refund order 7") as req:
        req.tool_call("refund", success=True, args={"order": 7})
        req.final("Refunded.")
    assert tracer.queued == 3 and tracer.dropped == 0 and tracer.sent == 0
    assert tracer.flush(0.2) is False  # nothing acknowledged: it says so, and returns
    tracer.close(timeout=0.1)
    assert tracer.queued == 0 and tracer.dropped == 3


def test_past_the_bound_the_newest_events_are_dropped_counted_and_warned_once(
    nowhere: str, caplog: pytest.LogCaptureFixture
) -> None:
    tracer = Tracer(nowhere, queue_size=5, warn_interval_s=60)
    with caplog.at_level(logging.WARNING, logger="tracejudge.client"):
        started = time.monotonic()
        req = tracer.request("a burst")
        for i in range(20):
            req.tool_call("step", success=True, args={"i": i})
        took = time.monotonic() - started
        tracer.close(timeout=0.2)
    assert took < 0.5  # handed over or dropped, never waited for
    assert req.dropped == 16 and tracer.dropped == 16 + 5  # the five buffered: not delivered
    drops = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(drops) == 2  # the first drop, then the close (forced); not one per event
    assert "buffer is full" in drops[0].getMessage()
    assert "21 dropped in all" in drops[1].getMessage()


def test_after_close_events_are_dropped_not_raised(nowhere: str) -> None:
    tracer = Tracer(nowhere)
    tracer.close(timeout=0.1)
    req = tracer.request("too late")
    req.final("done")
    assert req.dropped == 2 and tracer.dropped == 2


def test_an_unknown_kafka_option_fails_when_the_tracer_is_made(nowhere: str) -> None:
    with pytest.raises(TypeError, match="sasl_plain_usrname"):
        Tracer(nowhere, sasl_plain_usrname="me")
    config = kafka_config("b:9092", {"security_protocol": "SASL_SSL", "socket.timeout.ms": 500})
    assert config == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "socket.timeout.ms": 500,
    }


def test_the_async_tracer_has_the_same_surface() -> None:
    sync_api = {n for n in dir(Tracer) if not n.startswith("_")}
    async_api = {n for n in dir(AsyncTracer) if not n.startswith("_")}
    assert sync_api <= async_api
    assert async_api - sync_api == {"start"}  # kept for code written before lazy connections


def test_an_async_agent_records_while_no_broker_answers(nowhere: str) -> None:
    async def agent() -> AsyncTracer:
        tracer = AsyncTracer(nowhere, queue_size=100)
        with pytest.raises(RuntimeError):
            async with tracer.traced("summarise") as req:
                req.reasoning("read the log first")
                raise RuntimeError("the tool broke")
        assert req.finished  # the exception became the final response
        assert tracer.queued == 3
        assert await tracer.flush(0.1) is False
        await tracer.close(timeout=0.1)
        return tracer

    tracer = asyncio.run(agent())
    assert tracer.dropped == 3  # closed before any broker took them


def test_a_bad_session_end_or_outcome_is_dropped_counted_and_never_raised(nowhere: str) -> None:
    tracer = Tracer(nowhere, queue_size=1000, interventions=False)
    assert not tracer.end_session("")  # no key: refused here, not dead-lettered later
    assert not tracer.end_session("k" * 300)
    assert not tracer.session_outcome("chat-1", agent_name="bot")  # neither ok nor score
    assert not tracer.session_outcome("chat-1", agent_name="bot", score=7.0)  # not 0-1
    assert tracer.dropped == 4 and tracer.queued == 0
    assert tracer.end_session("chat-1", agent_name="bot")
    assert tracer.session_outcome("chat-1", agent_name="bot", ok=False)
    assert tracer.queued == 2
    tracer.close(timeout=0.1)
