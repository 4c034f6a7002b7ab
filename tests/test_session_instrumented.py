"""Sessions from a real instrumentation's spans: OpenInference's LangChain instrumentor with its
`using_session` (`session.id` on every span), two runs of a LangGraph agent recorded as its
OTLP exporter sent them (tests/instrumented/oi_langchain/agent.py, CAPTURE_SESSION=chat-oi-7,
scenario ok, twice), mapped by `tracejudge otel`'s mapping and judged by the worker's handlers."""

from __future__ import annotations

import json
from pathlib import Path

from tests.instrumentations import batches, events
from tracejudge.settings import Settings
from tracejudge.streams.replay.engine import replay

CAPTURE = Path(__file__).parent / "data" / "otel_sessions" / "oi_langchain-two_turns.b64.gz"


async def test_two_instrumented_runs_of_one_session_are_two_turns_of_one_session_verdict() -> None:
    found = events(batches(CAPTURE))
    requests = {e["request_id"] for e in found}
    assert len(requests) == 2
    assert {e.get("session_key") for e in found if e["type"] == "final_response"} == {"chat-oi-7"}
    records = [(e["request_id"].encode(), json.dumps(e).encode()) for e in found]
    result = await replay(Settings(redis_url=""), records)
    (((agent, key), verdict),) = result.sessions.items()
    assert key == "chat-oi-7" and verdict["final"]
    assert {t["request_id"] for t in verdict["turns"]} == requests
    assert agent == verdict["agent_name"] and agent  # the root's agent, as the requests name it
