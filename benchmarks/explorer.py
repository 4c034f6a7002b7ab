"""The verdict explorer's cost: memory of the verdicts it holds, time to read them from the
topic's JSON, and time to render its pages at that size.

    python -m benchmarks.explorer [--verdicts 20000]

Verdicts are made by the real rule judge (make_verdict) from varied requests of 40 agents with
two versions each, then fed to the store as the feed does (JSON bytes -> dict); pages are
rendered through the aiohttp app in process (no network), each 20 times.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time
import tracemalloc
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from tracejudge.judges.verdict.conclude import Policy
from tracejudge.judges.verdict.make import Closing, Judging, make_verdict
from tracejudge.judges.windows.records import step_record
from tracejudge.models import names
from tracejudge.models.events import parse_event
from tracejudge.settings import Settings
from tracejudge.streams.explorer.feed import take
from tracejudge.streams.explorer.server import make_app
from tracejudge.streams.explorer.store import VerdictStore

JUDGING = Judging(tool_call_budget=12, policy=Policy(), version="bench", llm=None)


def evaluation_bytes(i: int) -> bytes:
    rid = f"bench-{i}"
    agent = f"agent-{i % 40}"
    common: dict[str, Any] = {
        "request_id": rid,
        "agent_name": agent,
        "agent_version": "v1" if i < 10_000_000 and i % 2 else "v2",
        "ts": 1.7e9 + i,
    }
    fail = i % 3 == 0
    events = [
        {**common, "type": "task_started", "goal": f"refund order {i} for the customer"},
        {**common, "type": "tool_call", "step_index": 1, "tool": "get_order", "success": True,
         "result_preview": f"order {i}: 2 items, paid by card"},
        {**common, "type": "tool_call", "step_index": 2, "tool": "refund", "success": not fail,
         **({"error": "payment gateway timeout"} if fail else {"result_preview": "refunded"})},
        {**common, "type": "final_response", "step_index": 3,
         "output": "I could not refund it." if fail else f"Refunded order {i}: 20 EUR."},
    ]  # fmt: skip
    records = [step_record(parse_event(e), beyond_limit=False) for e in events]
    made = make_verdict(JUDGING, Closing(rid, "final_response", records, 4, 0, [], 1.7e9 + i, None))
    assert made.evaluation is not None
    return made.evaluation


async def render_times(store: VerdictStore) -> dict[str, float]:
    settings = Settings.model_validate({"redis_url": ""})
    client = TestClient(TestServer(make_app(settings, store)))
    await client.start_server()
    pages = {
        "verdicts (all)": "/",
        "verdicts (agent + failed)": "/?agent=agent-7&passed=no",
        "agents": "/agents",
        "agent page": "/agents/agent-7",
        "request page": "/requests/bench-7",
    }
    out = {}
    try:
        for name, path in pages.items():
            times = []
            for _ in range(20):
                start = time.perf_counter()
                response = await client.get(path)
                await response.read()
                assert response.status == 200, (path, response.status)
                times.append(time.perf_counter() - start)
            out[name] = statistics.median(times) * 1000
    finally:
        await client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--verdicts", type=int, default=20_000)
    args = parser.parse_args()
    distinct = [evaluation_bytes(i) for i in range(600)]  # judging is not what is measured
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    # the records' values as the consumer hands them over: the store keeps these bytes
    values = [
        json.dumps({**json.loads(distinct[i % 600]), "request_id": f"bench-{i}",
                    "agent_name": f"agent-{i % 40}", "ts": 1.7e9 + i}).encode()
        for i in range(args.verdicts)
    ]  # fmt: skip
    store = VerdictStore(args.verdicts)
    start = time.perf_counter()
    for value in values:
        take(store, names.EVALUATIONS, value)
    read_s = time.perf_counter() - start
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    each = held / len(store)
    print(f"verdicts held: {len(store)}; memory {held / 2**20:.1f} MiB ({each:.0f} B each)")
    print(f"read from JSON: {read_s * 1000:.0f} ms ({len(store) / read_s:,.0f} verdicts/s)")
    for name, ms in asyncio.run(render_times(store)).items():
        print(f"  {name:<28} {ms:6.1f} ms (median of 20)")


if __name__ == "__main__":
    main()
