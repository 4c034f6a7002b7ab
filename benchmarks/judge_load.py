"""The LLM judge's load yardstick: against a server that allows fewer calls than asked.

    python -m benchmarks.judge_load [--requests 400] [--rate 20] [--final-wait-s 200] [--check]

Starts the real Kafka and Redis, a scripted OpenAI-compatible server on loopback and a real
`tracejudge worker` (judge on, every request sent to it: TRACEJUDGE_LLM_SAMPLE_RATE=1,
TRACEJUDGE_LLM_CONCURRENCY=32, every other judge setting at its default). The server answers
each call after 2 s (with `usage`), and at once with a 429 and `Retry-After: 1` to any call
beyond the 8 it is serving; so it allows 8 / 2 s = 4 judged requests a second.

The agent side publishes `--requests` requests through `tracejudge.client` (task_started, two
tool calls, final_response; each goal distinct, so no verdict comes from the cache), closing
`--rate` of them a second. A request's close time is when its final_response was handed to the
client (its delivery is inside every delay below). The evaluations topic is read throughout:
per request, its first evaluation (any) and its final one (the first without `final: false`:
the rules' verdict published at close as pending is replaced by the judge's, or by the rules'
with the reason it was not judged, under the same evaluation_id). The worker's /metrics is
scraped every second for the judge group's lag (`tracejudge_judge_queue_lag`, summed over its
samples) and its oldest job's age (`tracejudge_judge_oldest_job_age_seconds`, the largest).
A warm-up request is judged before the clock starts: the judge consumer may take its first job
some seconds after /health says 200, a start-up cost rather than load.

Judged throughput: final evaluations with judge_status ok, divided by the time from the first
call reaching the server to the last of those evaluations published (broker timestamp): the
period the judge was busy. Compared with the server's allowance, 8 / 2 s = 4 a second.

Goals (`--check` exits 1 when one is missed): at least 95 % of the
requests end ok, none circuit_open, throughput at least 0.9 of the allowance, every request's
first evaluation within 5 s of its close, and the lag metric seen above zero while jobs wait.
Bounded: the publishing takes requests / rate seconds; then finals are awaited at most
`--final-wait-s`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.pipeline import pct
from tests.fake_llm import FakeLLM, Reply, tool_call_reply, verdict
from tests.integration.harness import WorkerProcess, worker_env
from tests.realservices import start_kafka, start_redis
from tracejudge.client import AsyncTracer

LATENCY_S = 2.0
SERVER_LIMIT = 8  # calls served at once; one more gets a 429
RETRY_AFTER_S = 1
CONCURRENCY = 32  # TRACEJUDGE_LLM_CONCURRENCY: four times what the server allows
ALLOWANCE = SERVER_LIMIT / LATENCY_S  # judged requests a second the server can give
FIRST_WITHIN_S = 5.0
LAG = "tracejudge_judge_queue_lag"
AGE = "tracejudge_judge_oldest_job_age_seconds"


class LimitedServer:
    """The script of a FakeLLM: a 2 s answer while fewer than SERVER_LIMIT are being served,
    else an immediate 429 with Retry-After. The script runs on the server's loop before the
    reply's delay, so the calls being served are those accepted whose end is still ahead."""

    def __init__(self) -> None:
        self.ends: list[float] = []  # when each accepted call's answer goes out
        self.answers: Counter[int] = Counter()
        self.max_served = 0
        self.first_accepted: float | None = None

    def __call__(self, body: dict[str, Any], n: int) -> Reply:
        now = time.time()
        self.ends = [end for end in self.ends if end > now]
        if len(self.ends) >= SERVER_LIMIT:
            self.answers[429] += 1
            return Reply(
                status=429,
                body={"error": {"message": "rate limited", "type": "rate_limit_exceeded"}},
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self.ends.append(now + LATENCY_S)
        self.max_served = max(self.max_served, len(self.ends))
        if self.first_accepted is None:
            self.first_accepted = now
        self.answers[200] += 1
        return tool_call_reply(verdict(True, False), delay_s=LATENCY_S)


@dataclass(frozen=True)
class Record:
    """One evaluation of a request, as read from the topic."""

    at: float  # broker timestamp (set by the worker's producer: this machine's clock)
    status: str  # judge_status
    error: str | None  # judge_error
    final: bool  # false: the rules' verdict published at close, the judge's to come
    reason: str | None  # the last of its reasons: why a skipped one was skipped

    @classmethod
    def of(cls, at: float, value: dict[str, Any]) -> Record:
        reasons = value.get("reasons") or [None]
        # `final: false` marks a pending verdict; an early draft of the worker said it with
        # judge_status "pending" instead
        final = bool(value.get("final", True)) and value["judge_status"] != "pending"
        return cls(at, value["judge_status"], value.get("judge_error"), final, reasons[-1])


@dataclass
class Seen:
    """One request's evaluations, in the order read."""

    records: list[Record] = field(default_factory=list)

    @property
    def first(self) -> Record | None:
        return self.records[0] if self.records else None

    @property
    def final(self) -> Record | None:
        return next((r for r in self.records if r.final), None)


@dataclass
class Scrape:
    at: float
    lag: float | None  # None: the gauge is absent
    age: float | None


@dataclass
class Evaluations:
    """The evaluations of the requests in `seen`, read from the topic as they come."""

    seen: dict[str, Seen] = field(default_factory=dict)
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # every request has a final

    def all_final(self) -> bool:
        return all(s.final is not None for s in self.seen.values())

    async def until_all_final(self, timeout_s: float) -> bool:
        if not self.all_final():
            self.settled.clear()  # the reader sets it after the batch that completes them
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.settled.wait(), timeout_s)
        return self.all_final()

    async def read(self, bootstrap: str, topic: str, stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for r in records:
                        value = json.loads(r.value)
                        if value.get("request_id") in self.seen:
                            self.seen[value["request_id"]].records.append(
                                Record.of(r.timestamp / 1000, value)
                            )
                if batch and self.all_final():
                    self.settled.set()
        finally:
            await consumer.stop()


def gauge(text: str, name: str) -> list[float]:
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


async def scrape_metrics(port: int, scrapes: list[Scrape], stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(timeout=2.0) as http:
        while not stop.is_set():
            try:
                text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            except httpx.HTTPError:
                text = None
            if text is not None:
                lag, age = gauge(text, LAG), gauge(text, AGE)
                scrapes.append(
                    Scrape(time.time(), sum(lag) if lag else None, max(age) if age else None)
                )
            # a 1 s period; `wait_for` returns early when told to stop
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)


async def publish(
    tracer: AsyncTracer, run: str, requests: int, rate: float, seen: dict[str, Seen]
) -> dict[str, float]:
    """Closes `rate` requests a second on a fixed schedule; each request's close time."""
    closed: dict[str, float] = {}
    start = time.monotonic()
    for i in range(requests):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        rid = f"{run}-{i}"
        seen[rid] = Seen()
        req = tracer.request(f"refund order {i} of run {run}", request_id=rid, agent_name="load")
        req.tool_call("get_order", success=True, args={"order": i}, result="paid, $12")
        req.tool_call("refund", success=True, args={"order": i}, result="refunded")
        req.final(f"Order {i} was refunded: $12.")
        closed[rid] = time.time()
    return closed


async def warm_up(tracer: AsyncTracer, run: str, evals: Evaluations, timeout_s: float) -> bool:
    """One request judged before the clock starts: the judge consumer takes its first job some
    seconds after /health says 200, which is a start-up cost, not load."""
    rid = f"{run}-warm-up"
    evals.seen[rid] = Seen()
    req = tracer.request("warm the judge up", request_id=rid, agent_name="load")
    req.final("warm")
    judged = await evals.until_all_final(timeout_s)
    del evals.seen[rid]
    return judged


async def run(requests: int, rate: float, final_wait_s: float, check: bool) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-judge-load-"))
    kafka = start_kafka(workdir / "kafka")
    redis = start_redis(workdir / "redis")
    server = LimitedServer()
    try:
        with FakeLLM(server) as model:
            env = worker_env(
                kafka.address,
                redis.address,
                workdir,
                "judge-load",
                partitions=4,
                llm_judge_enabled="true",
                llm_base_url=model.base_url,
                llm_api_key="test",
                llm_concurrency=CONCURRENCY,
                llm_sample_rate=1,
            )
            worker = WorkerProcess(env, workdir / "worker.log")
            worker.start()
            try:
                code = await measure(
                    worker, kafka.address, model, server, requests, rate, final_wait_s
                )
            finally:
                worker.stop()
    finally:
        kafka.stop()
        redis.stop()
    print(f"worker log: {workdir / 'worker.log'}")
    return code if check else 0


async def measure(
    worker: WorkerProcess,
    kafka: str,
    model: FakeLLM,
    server: LimitedServer,
    requests: int,
    rate: float,
    final_wait_s: float,
) -> int:
    run_id = uuid.uuid4().hex[:6]
    evals = Evaluations()
    scrapes: list[Scrape] = []
    stop = asyncio.Event()
    reader = asyncio.create_task(evals.read(kafka, worker.topic("evaluations"), stop))
    tracer = AsyncTracer(kafka, topic_prefix=worker.settings.topic_prefix, linger_ms=5)
    try:
        if not await warm_up(tracer, run_id, evals, timeout_s=120):
            # nothing was measured: an error whether or not --check was given
            raise RuntimeError("the warm-up request was not judged within 120 s:\n" + worker.tail())
        server.answers.clear()
        server.first_accepted = None
        server.max_served = model.max_in_flight = 0
        scraper = asyncio.create_task(scrape_metrics(worker.settings.web_port, scrapes, stop))
        started = time.time()
        closed = await publish(tracer, run_id, requests, rate, evals.seen)
        await tracer.flush(30)
        published = time.time()
        await evals.until_all_final(final_wait_s)
        stop.set()
        await asyncio.gather(reader, scraper)
    finally:
        stop.set()
        await tracer.close()
        reader.cancel()
    print(
        f"{requests} requests closed at {rate:g}/s in {published - started:.1f} s "
        f"({tracer.sent} events acked, {tracer.dropped} dropped); server: {LATENCY_S:g} s "
        f"latency, 429 with Retry-After {RETRY_AFTER_S} s beyond {SERVER_LIMIT} at once; "
        f"TRACEJUDGE_LLM_CONCURRENCY={CONCURRENCY}, sample rate 1"
    )
    return report(evals.seen, closed, scrapes, model, server, started)


def report(
    seen: dict[str, Seen],
    closed: dict[str, float],
    scrapes: list[Scrape],
    model: FakeLLM,
    server: LimitedServer,
    started: float,
) -> int:
    requests = len(closed)
    finals = {rid: s.final for rid, s in seen.items()}
    outcome = Counter(
        (f.status, f.error or (f.reason if f.status == "skipped" else None))
        if f is not None
        else ("no final evaluation", None)
        for f in finals.values()
    )
    ok = [f for f in finals.values() if f is not None and f.status == "ok"]
    circuit_open = sum(1 for f in finals.values() if f is not None and f.error == "circuit_open")
    print("final evaluations by judge_status (judge_error, or a skipped one's reason):")
    for (status, why), n in outcome.most_common():
        print(f"  {status}{f' ({why})' if why else ''}: {n} ({n / requests:.1%})")

    busy_from = server.first_accepted
    throughput = ratio = 0.0
    if ok and busy_from is not None:
        busy_s = max(f.at for f in ok) - busy_from
        throughput = len(ok) / busy_s
        ratio = throughput / ALLOWANCE
        print(
            f"judged throughput: {len(ok)} ok in {busy_s:.1f} s (first call at the server -> "
            f"last ok evaluation) = {throughput:.2f}/s; the server allows {ALLOWANCE:g}/s: "
            f"{ratio:.2f} of it"
        )
    print(
        f"server: {server.answers[200]} answered, {server.answers[429]} answered 429; at most "
        f"{server.max_served} served and {model.max_in_flight} calls in flight at once"
    )

    first = [s.first.at - closed[rid] for rid, s in seen.items() if s.first is not None]
    without = sum(1 for s in seen.values() if s.first is None)
    late = sum(1 for d in first if d > FIRST_WITHIN_S) + without
    if first:
        print(
            f"first evaluation after close: p50 {pct(first, 50):.2f} s, p99 {pct(first, 99):.2f} "
            f"s, max {max(first):.2f} s; over {FIRST_WITHIN_S:g} s or none: {late} of {requests} "
            f"({without} none)"
        )
    final_delays = [f.at - closed[rid] for rid, f in finals.items() if f is not None]
    if final_delays:
        print(
            f"final evaluation after close: p50 {pct(final_delays, 50):.1f} s, p99 "
            f"{pct(final_delays, 99):.1f} s, max {max(final_delays):.1f} s"
        )
    pending_first = sum(1 for s in seen.values() if s.first is not None and not s.first.final)
    print(f"first evaluations pending (final false): {pending_first} of {requests}")

    lags = [s.lag for s in scrapes if s.lag is not None]
    ages = [s.age for s in scrapes if s.age is not None]
    print(
        f"{LAG}: {f'max {max(lags):g}' if lags else 'absent'}; "
        f"{AGE}: {f'max {max(ages):.1f} s' if ages else 'absent'} ({len(scrapes)} scrapes)"
    )
    if lags or ages:
        step = max(1, len(scrapes) // 12)
        print(
            "  samples (s since the first close: lag, oldest age): "
            + "; ".join(
                f"{s.at - started:.0f}: {s.lag if s.lag is not None else '-'}, "
                f"{'-' if s.age is None else round(s.age, 1)}"
                for s in scrapes[::step]
            )
        )

    missed = [
        goal
        for goal, met in (
            (f"ok >= 95 % ({len(ok) / requests:.1%})", len(ok) >= 0.95 * requests),
            (f"no circuit_open ({circuit_open})", circuit_open == 0),
            (f"throughput >= 0.9 of the allowance ({ratio:.2f})", ratio >= 0.9),
            (f"every first evaluation within {FIRST_WITHIN_S:g} s ({late} not)", late == 0),
            ("the lag metric shows the waiting jobs", bool(lags) and max(lags) > 0),
        )
        if not met
    ]
    print("goals: all met" if not missed else "goals missed: " + "; ".join(missed))
    return 1 if missed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rate", type=float, default=20.0, help="requests closed a second")
    parser.add_argument(
        "--final-wait-s", type=float, default=200.0, help="longest wait for the last finals"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args()
    sys.exit(asyncio.run(run(args.requests, args.rate, args.final_wait_s, args.check)))


if __name__ == "__main__":
    main()
