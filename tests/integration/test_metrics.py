"""GET /metrics on the real broker: counts and the verdict-latency histogram agree with what
was published and what came out; `replay` of the same events (from the file and from the
topic) gives the worker's verdicts."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import TAU_DATA
from tests.integration.harness import WorkerProcess, grouped, produce, worker_env
from tracejudge.streams.kafka.io import read_since
from tracejudge.streams.replay.engine import replay

pytestmark = pytest.mark.integration
RUNS = 20  # tau-bench runs replayed


def scrape(worker: WorkerProcess) -> dict[str, list[tuple[dict[str, str], float]]]:
    url = f"http://127.0.0.1:{worker.settings.web_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def total(
    samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str
) -> float:
    return sum(
        v for got, v in samples.get(name, []) if all(got.get(k) == x for k, x in labels.items())
    )


def tau_runs(n: int) -> list[dict[str, Any]]:
    """The first n runs, up to each run's final response (later events would be late)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for line in (TAU_DATA / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        rid = event["request_id"]
        if rid not in runs and len(runs) == n:
            continue
        steps = runs.setdefault(rid, [])
        if not steps or steps[-1]["type"] != "final_response":
            steps.append(event)
    return [e for steps in runs.values() for e in steps]


async def test_metrics_count_what_was_published_and_time_every_verdict(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    events = tau_runs(RUNS)
    worker = WorkerProcess(
        worker_env(kafka_bootstrap, redis_url, tmp_path, "metrics"), tmp_path / "worker.log"
    ).start()
    try:
        before = scrape(worker)
        assert total(before, "tracejudge_events_total") == 0
        sent_at = time.time()
        await produce(
            kafka_bootstrap,
            worker.topic("events"),
            [(e["request_id"].encode(), json.dumps(e).encode()) for e in events],
        )
        rids = {e["request_id"] for e in events}
        evaluations = await grouped(worker, "evaluations", rids, wait_for_all=True, timeout_s=120)
        elapsed = time.time() - sent_at
        got = scrape(worker)
        by_type = Counter(e["type"] for e in events)
        for kind, count in by_type.items():
            assert total(got, "tracejudge_events_total", type=kind, status="added") == count
        assert total(got, "tracejudge_events_total") == len(events)
        quadrants = Counter(
            ("success" if v[0]["success"] else "failure")
            + ("_incomplete" if v[0]["incomplete"] else "_complete")
            for v in evaluations.values()
        )
        for quadrant, count in quadrants.items():
            assert total(got, "tracejudge_evaluations_total", quadrant=quadrant) == count
        assert total(got, "tracejudge_evaluations_total", judge_status="disabled") == RUNS
        assert total(got, "tracejudge_windows_closed_total", closed_by="final_response") == RUNS
        # one latency per verdict, each between 0 and the time the whole replay took
        assert total(got, "tracejudge_verdict_latency_seconds_count") == RUNS
        latency_sum = total(got, "tracejudge_verdict_latency_seconds_sum")
        assert 0 < latency_sum <= RUNS * elapsed
        buckets = sorted(
            (float(labels["le"]), v)
            for labels, v in got["tracejudge_verdict_latency_seconds_bucket"]
        )
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
        assert buckets[-1] == (float("inf"), RUNS)
        assert total(got, "tracejudge_open_windows") == 0
        assert total(got, "tracejudge_dead_letters_total") == 0
        # the watchdog's next probe (every 5 s) reports the lag of every owned input partition
        deadline = time.monotonic() + 30
        while not got.get("tracejudge_consumer_lag") and time.monotonic() < deadline:
            await asyncio.sleep(1)
            got = scrape(worker)
        lag = got["tracejudge_consumer_lag"]
        assert {labels["topic"] for labels, _ in lag} == {
            worker.topic("events"),
            worker.topic("responses"),
        }
        # replay, offline and from what the cluster saw: the worker's verdicts, ts aside
        offline = await replay(
            worker.settings, [(e["request_id"].encode(), json.dumps(e).encode()) for e in events]
        )
        seen = await read_since(worker.settings, worker.topic("events"), since_s=600)
        online = await replay(worker.settings, seen)
        published = {rid: v[0] for rid, v in evaluations.items()}
        for result in (offline, online):
            assert {r: without_ts(e) for r, e in result.evaluations.items()} == {
                r: without_ts(e) for r, e in published.items()
            }
    finally:
        worker.stop()


def without_ts(evaluation: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in evaluation.items() if k != "ts"}
