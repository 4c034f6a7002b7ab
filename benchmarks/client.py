"""The agent-side client: what recording costs the agent, and how fast events reach the broker.

    python -m benchmarks.client [--requests 40000]

Starts the real Kafka like the tests do. One agent thread records `requests` requests of five
events each (task, tool call, reasoning, tool call, final answer) through `Tracer`, as fast as
it can, then flushes. Prints:
- events per second delivered to the broker (first event recorded -> last acknowledged);
- the agent's own time per event (wall clock around each request, / 5): p50, p99, max;
- the same per-event time while no broker answers (a bound, never-listened loopback port):
  the events are buffered, the agent must not notice;
- what the client alone installs: this repository's wheel into a fresh venv (dependencies
  from the package index), the packages and megabytes it holds, and whether `import
  tracejudge.client` loads anything of the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.pipeline import pct
from benchmarks.side_by_side import create
from tests.integration.test_packaging import build_wheel
from tests.realservices import start_kafka
from tracejudge.client import Tracer

EVENTS_PER_REQUEST = 5


def record(tracer: Tracer, requests: int) -> list[float]:
    """Per-event agent time (µs) of each request."""
    costs = []
    for i in range(requests):
        started = time.perf_counter()
        req = tracer.request(f"refund order {i} for the customer", agent_name="bench-agent")
        req.tool_call("get_order", success=True, args={"order": i}, result={"total": 20})
        req.reasoning("the order is paid and within the window: refund it")
        req.tool_call("refund", success=True, args={"order": i}, result="ok", latency_ms=12)
        req.final(f"Refunded order {i}: 20 EUR back to the card, customer notified.")
        costs.append((time.perf_counter() - started) / EVENTS_PER_REQUEST * 1e6)
    return costs


def line(label: str, costs: list[float]) -> str:
    return (
        f"{label:<38} p50 {pct(costs, 50):6.1f} µs  p99 {pct(costs, 99):6.1f} µs  "
        f"max {max(costs):8.1f} µs"
    )


CHECK_IMPORTS = (
    "import sys, tracejudge.client; "
    "print([m for m in ('faust', 'aiokafka', 'redis', 'tracejudge.streams') if m in sys.modules])"
)


def fresh_install(workdir: Path) -> str:
    """The wheel of this repository alone in a new venv: packages, MB, worker modules loaded."""
    wheel = build_wheel(workdir)  # as the packaging test builds it
    venv = workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "-q", "--disable-pip-version-check", "install", str(wheel)],
        check=True,
    )
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    names = sorted(p["name"] for p in json.loads(listed) if p["name"] not in ("pip", "setuptools"))
    site = next((venv / "lib").glob("python*/site-packages"))
    skip = ("pip", "setuptools", "_distutils_hack", "distutils-precedence.pth")
    size = sum(
        f.stat().st_size
        for top in site.iterdir()
        if not top.name.startswith(skip)
        for f in ([top] if top.is_file() else top.rglob("*"))
        if f.is_file()
    )
    loaded = subprocess.run(
        [python, "-c", CHECK_IMPORTS], check=True, capture_output=True, text=True
    ).stdout.strip()
    return (
        f"client alone in a fresh venv: {len(names)} packages, {size / 1e6:.1f} MB "
        f"({', '.join(names)}); worker modules loaded by `import tracejudge.client`: {loaded}"
    )


def main(requests: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-client-"))
    kafka = start_kafka(workdir / "kafka")
    prefix = f"bench-{uuid.uuid4().hex[:6]}."
    try:
        asyncio.run(create(kafka.address, [prefix + "events"], 4))
        tracer = Tracer(kafka.address, topic_prefix=prefix, queue_size=requests * 10)
        record(tracer, 200)  # connected and warm
        assert tracer.flush(30)
        before, started = tracer.sent, time.perf_counter()
        costs = record(tracer, requests)
        handed = time.perf_counter() - started
        assert tracer.flush(120), f"{tracer.queued} not delivered"
        took = time.perf_counter() - started
        events = requests * EVENTS_PER_REQUEST
        assert tracer.sent - before == events and tracer.dropped == 0
        tracer.close()
        with socket.socket() as held:  # connections refused: a broker that is away
            held.bind(("127.0.0.1", 0))
            away = Tracer(f"127.0.0.1:{held.getsockname()[1]}", queue_size=requests * 10)
            away_costs = record(away, min(requests, 10_000))
            away.close(timeout=0.1)
        print(f"{events} events from one thread, {requests} requests of {EVENTS_PER_REQUEST}")
        print(
            f"delivered to the broker: {events / took:,.0f} events/s "
            f"(handed over at {events / handed:,.0f}/s)"
        )
        print(line("agent time per event, broker up", costs))
        print(line("agent time per event, broker away", away_costs))
        print(fresh_install(workdir / "install"))
    finally:
        kafka.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=40_000)
    main(parser.parse_args().requests)
