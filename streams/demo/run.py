"""`tracejudge demo`: an embedded broker, a worker, sample traces, a table of verdicts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

from tracejudge.models import names
from tracejudge.streams.demo.embedded import (
    Child,
    free_port,
    start_tansu,
    start_worker,
    wait_healthy,
)
from tracejudge.streams.demo.samples import SampleTrace, sample_traces
from tracejudge.streams.kafka.admin import ensure_topics
from tracejudge.streams.kafka.io import publish_lines, read_topic
from tracejudge.streams.settings import Settings

IDLE_TIMEOUT_S = 3.0


def _say(text: str) -> None:
    print(text, flush=True)


def _redis_up(url: str) -> bool:
    if not url:
        return False
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379), 0.5):
            return True
    except OSError:
        return False


def run_demo(settings: Settings, timeout_s: float = 180.0, serve: bool = False) -> int:
    """`serve`: after the table, keep the broker and the worker up for the examples (and any
    agent) until Ctrl-C."""
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-demo-"))
    children: list[Child] = []
    try:
        code = _run(settings, workdir, children, timeout_s)
        if code == 0 and serve:
            _serve(children)
        return code
    finally:
        for child in reversed(children):
            child.stop()


def _serve(children: list[Child]) -> None:
    _say(
        f"serving: the broker at {_SERVING['bootstrap']}, topics under "
        f"'{_SERVING['prefix']}'; run an example in another shell:\n"
        f"  TRACEJUDGE_KAFKA_BOOTSTRAP={_SERVING['bootstrap']} "
        f"TRACEJUDGE_TOPIC_PREFIX={_SERVING['prefix']} .venv/bin/python -m examples.otel_agent\n"
        "and look at the verdicts in a browser, at http://127.0.0.1:8090/ once it runs:\n"
        f"  TRACEJUDGE_KAFKA_BOOTSTRAP={_SERVING['bootstrap']} "
        f"TRACEJUDGE_TOPIC_PREFIX={_SERVING['prefix']} .venv/bin/tracejudge ui\n"
        "Ctrl-C stops the broker and the worker."
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set() and all(child.alive() for child in children):
        stop.wait(0.5)
    _say("stopping")


_SERVING: dict[str, str] = {}  # where the demo's broker and topics are, for --serve


def _run(settings: Settings, workdir: Path, children: list[Child], timeout_s: float) -> int:
    started = time.monotonic()
    run_id = f"demo-{uuid.uuid4().hex[:6]}"
    env = {
        "TRACEJUDGE_WEB_PORT": str(free_port()),
        "TRACEJUDGE_DATA_DIR": str(workdir / "data"),
        "TRACEJUDGE_IDLE_TIMEOUT_S": str(IDLE_TIMEOUT_S),
        "TRACEJUDGE_IDLE_CHECK_INTERVAL_S": "0.5",
        "TRACEJUDGE_LOG_LEVEL": "warning",
    }
    if "TRACEJUDGE_KAFKA_BOOTSTRAP" in os.environ:
        bootstrap = settings.kafka_bootstrap
        # a shared broker: keep the demo's topics and group apart from anything else there
        env["TRACEJUDGE_TOPIC_PREFIX"] = f"{run_id}."
        env["TRACEJUDGE_APP_ID"] = run_id
        _say(f"using the Kafka at {bootstrap}")
    else:
        broker, bootstrap = start_tansu(workdir)
        children.append(broker)
        env["TRACEJUDGE_EMBEDDED_BROKER_TIMING"] = "true"
        _say(f"started the embedded broker (Tansu, memory only) at {bootstrap}")
    env["TRACEJUDGE_KAFKA_BOOTSTRAP"] = bootstrap
    if _redis_up(settings.redis_url):
        _say(f"verdicts also go to Redis at {settings.redis_url}")
    else:
        env["TRACEJUDGE_REDIS_URL"] = ""
        _say("no Redis running: verdicts go to Kafka only (Redis is optional for the demo)")
    overrides = {k[len("TRACEJUDGE_") :].lower(): v for k, v in env.items()}
    demo_settings = Settings.model_validate({**settings.model_dump(), **overrides})
    _SERVING.update(bootstrap=bootstrap, prefix=demo_settings.topic_prefix)
    # topics exist before the worker and the reader start, so neither waits on metadata
    asyncio.run(ensure_topics(demo_settings))
    worker = start_worker(env, workdir / "worker.log")
    children.append(worker)
    _say("starting the worker (joining its consumer group takes a few seconds)...")
    wait_healthy(worker, demo_settings.web_port, timeout_s)
    _say(f"worker ready after {time.monotonic() - started:.1f}s; publishing 5 sample traces")
    traces = sample_traces(run_id)
    remaining = max(30.0, timeout_s - (time.monotonic() - started))
    verdicts = asyncio.run(_publish_and_collect(demo_settings, traces, remaining))
    _print_table(traces, verdicts)
    missing = [t.name for t in traces if t.request_id not in verdicts]
    if missing:
        _say(f"no verdict for: {', '.join(missing)}; worker log:\n{worker.tail()}")
        return 1
    wrong = [
        t.name
        for t in traces
        if (verdicts[t.request_id]["success"], verdicts[t.request_id]["incomplete"])
        != (t.expect_success, t.expect_incomplete)
    ]
    _say(f"done in {time.monotonic() - started:.1f}s.")
    if wrong:
        _say(f"unexpected verdicts for: {', '.join(wrong)}")
    else:
        _say(
            "Next: point TRACEJUDGE_KAFKA_BOOTSTRAP at your Kafka, run `tracejudge worker`, "
            "publish with `tracejudge publish FILE.jsonl`, watch `tracejudge tail evaluations` "
            "or the explorer, `tracejudge ui`. To browse these verdicts: the demo with --serve."
        )
    return 1 if wrong else 0


async def _publish_and_collect(
    settings: Settings, traces: list[SampleTrace], timeout_s: float
) -> dict[str, dict[str, object]]:
    lines = [json.dumps(e).encode() for t in traces for e in t.events]
    wanted = {t.request_id for t in traces}
    verdicts: dict[str, dict[str, object]] = {}
    extras: dict[str, dict[str, int]] = {
        rid: {names.REFLECTIONS: 0, names.ALERTS: 0} for rid in wanted
    }

    deadline = time.monotonic() + timeout_s
    complete_at: list[float] = []

    def finished() -> bool:
        # reflections and alerts are sent with their evaluation: a moment more catches them
        if not complete_at and wanted <= set(verdicts):
            complete_at.append(time.monotonic())
        return time.monotonic() > deadline or bool(
            complete_at and time.monotonic() > complete_at[0] + 1.0
        )

    async def collect(kind: str) -> None:
        async for record in read_topic(
            settings, settings.topic(kind), from_beginning=True, stop=finished
        ):
            value = json.loads(record.value)
            rid = value.get("request_id")
            if rid not in wanted:
                continue
            if kind == names.EVALUATIONS:
                verdicts[rid] = value
            else:
                extras[rid][kind] += 1

    readers = [
        asyncio.create_task(collect(k))
        for k in (names.EVALUATIONS, names.REFLECTIONS, names.ALERTS)
    ]
    await publish_lines(settings, settings.topic(names.EVENTS), lines)
    _say(
        f"published {len(lines)} events; the last trace goes quiet and closes after "
        f"{IDLE_TIMEOUT_S:.0f}s idle"
    )
    await asyncio.gather(*readers)
    for rid, counts in extras.items():
        if rid in verdicts:
            verdicts[rid].update(counts)
    return verdicts


def _print_table(traces: list[SampleTrace], verdicts: dict[str, dict[str, object]]) -> None:
    header = (
        f"{'case':<27} {'score':>5} {'pass':<5} {'success':<8} {'incomplete':<10} "
        f"{'closed_by':<15} {'reflect':>7} {'alerts':>6}"
    )
    rows = [header, "-" * len(header)]
    for t in traces:
        v = verdicts.get(t.request_id)
        if v is None:
            rows.append(f"{t.name:<27} {'(no verdict)':>5}")
            continue
        rows.append(
            f"{t.name:<27} {v['overall_score']!s:>5} {v['passed']!s:<5} {v['success']!s:<8} "
            f"{v['incomplete']!s:<10} {v['closed_by']!s:<15} {v.get('reflections', 0)!s:>7} "
            f"{v.get('alerts', 0)!s:>6}"
        )
    sys.stdout.write("\n" + "\n".join(rows) + "\n\n")
    sys.stdout.flush()
