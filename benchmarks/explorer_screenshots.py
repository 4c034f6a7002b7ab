"""The explorer's pictures in the docs (docs/images/explorer-*.png), taken after real runs.

    python -m benchmarks.explorer_screenshots [--minutes 20] [--out docs/images] [--only NAME]

Replays the 200 tau-bench airline runs of ../shared/data/tau_airline (a GPT-4o customer-service
agent; the 40-run subset in tests/data/tau_airline when ../shared is absent, and it says so)
through a real `tracejudge worker` on the Kafka and Redis of TRACEJUDGE_KAFKA_BOOTSTRAP and
TRACEJUDGE_REDIS_URL (started on loopback when unset), with topics of its own, then opens
`tracejudge ui` in Debian's headless Chromium and saves the verdicts list, an agent's page and
a failed request's page. Once every run has its verdict, each run's label (its tau-bench reward)
goes to the worker as an `outcome` event (source "reward"), as a user's rewards would; the
agent page's agreement section (figures per verdict source and the reliability plot) is saved
as explorer-agreement.png once the explorer shows every labelled run joined.

Why it takes `--minutes`: the explorer bins an agent's verdicts on the evaluation's time, which
the worker sets when it closes the run (its own clock, not the events'). Sent at once, the 200
verdicts would all come within seconds, and the agent's page would rightly say that is too few
minutes for a trend. So the runs go at an even pace over `--minutes` of real time, in the
data's order; each run's events go together, as a live agent sends them. Nothing else is
changed but the agent's name: the data leaves `agent_name` empty, `--agent` names it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.browser import (
    browser,
    capture_element,
    capture_page,
    explorer,
    wait_until,
)
from tests.integration.harness import WorkerProcess, wait_counter, worker_env
from tests.realservices import ROOT, start_kafka, start_redis
from tracejudge.client.events import outcome_event
from tracejudge.judges.agreement.tally import label_ok

SHARED = ROOT.parent / "shared" / "data" / "tau_airline" / "events.jsonl"
VENDORED = ROOT / "tests" / "data" / "tau_airline" / "events.jsonl"
PAGES = ("verdicts", "agent", "request", "agreement")
JOIN_WAIT_S = 180.0  # the worker joins outcomes at once; the explorer reads them every 30 s


def outcomes(path: Path, found: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One `outcome` event per labelled run (labels.json beside the events): its reward."""
    labels = json.loads((path.parent / "labels.json").read_text())
    made = []
    for events in found:
        rid = events[0]["request_id"]
        ok = label_ok(labels.get(rid))
        if ok is not None:
            made.append(outcome_event(rid, ok=ok, source="reward"))
    return made


async def send(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for event in events:
            await producer.send(
                topic, key=event["request_id"].encode(), value=json.dumps(event).encode()
            )
        await producer.flush()
    finally:
        await producer.stop()


def joined_runs(page: WebDriver) -> int:
    """The runs with outcomes the agent page shows (0 before any)."""
    cells = page.find_elements(By.CSS_SELECTOR, '#agreement tr[data-figure="runs"] td.num')
    return int(cells[0].text.split()[0]) if cells else 0


def runs(path: Path, agent: str) -> list[list[dict[str, Any]]]:
    """Each run's events in the file's order, the agent named."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    with path.open() as lines:
        for line in lines:
            if line.strip():
                event = json.loads(line)
                event["agent_name"] = agent
                by_run.setdefault(event["request_id"], []).append(event)
    return list(by_run.values())


async def send_paced(
    bootstrap: str, topic: str, found: list[list[dict[str, Any]]], minutes: float
) -> None:
    gap = minutes * 60 / max(len(found) - 1, 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        start = time.monotonic()
        for i, events in enumerate(found):
            await asyncio.sleep(max(0.0, start + i * gap - time.monotonic()))
            for event in events:
                await producer.send(
                    topic, key=event["request_id"].encode(), value=json.dumps(event).encode()
                )
            await producer.flush()
            if i % 20 == 0:
                print(f"  {i + 1}/{len(found)} runs sent", flush=True)
    finally:
        await producer.stop()


def save(driver: WebDriver, path: Path, whole: bool) -> None:
    """The window, or the whole page (through the DevTools protocol)."""
    if whole:
        capture_page(driver, path)
    else:
        driver.save_screenshot(str(path))


def held(base: str) -> int:
    with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
        return int(json.loads(response.read())["verdicts"])


@contextmanager
def services(workdir: Path) -> Iterator[tuple[str, str]]:
    kafka, redis = start_kafka(workdir), start_redis(workdir)
    try:
        yield kafka.address, redis.address
    finally:
        redis.stop()
        kafka.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="spread the runs over this")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--agent", default="tau-airline-gpt-4o")
    parser.add_argument(
        "--only", action="append", choices=PAGES, help="save only this page (repeatable)"
    )
    args = parser.parse_args()
    source = SHARED if SHARED.exists() else VENDORED
    if source is VENDORED:
        print(f"{SHARED} is absent: the 40-run subset {VENDORED} is used instead")
    if not source.exists():
        print(f"neither {SHARED} nor {VENDORED} exists: nothing to replay")
        return 2
    found = runs(source, args.agent)
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="shots-")))
        kafka, redis = stack.enter_context(services(workdir))
        env = worker_env(kafka, redis, workdir, "shots")
        worker = WorkerProcess(env, workdir / "worker.log").start()
        stack.callback(worker.stop)
        print(
            f"{len(found)} runs of {source} over {args.minutes:g} min (topics {worker.topic('')})"
        )
        asyncio.run(send_paced(kafka, worker.topic("events"), found, args.minutes))
        asyncio.run(wait_counter(worker, len(found), timeout_s=300))
        base = stack.enter_context(explorer(env, workdir / "explorer.log"))
        labelled = outcomes(source, found)  # after every run's verdict, as outcomes come
        asyncio.run(send(kafka, worker.topic("events"), labelled))
        print(f"{len(labelled)} outcomes sent (the runs' rewards)")
        page = stack.enter_context(browser())
        wait_until(lambda: held(base) >= len(found), 120, worker.tail)
        args.out.mkdir(parents=True, exist_ok=True)
        only, saved = set(args.only or PAGES), []
        agent_page = f"{base}/agents/{urllib.parse.quote(args.agent)}"
        if "verdicts" in only:
            page.get(f"{base}/")
            save(page, args.out / "explorer-verdicts.png", whole=False)
            saved.append("explorer-verdicts.png")
        if "agent" in only:
            page.get(agent_page)
            bars = page.find_elements(By.CSS_SELECTOR, "svg.plot rect.count")
            print(f"agent page: {len(bars)} bins")
            save(page, args.out / "explorer-agent.png", whole=True)
            saved.append("explorer-agent.png")
        if "request" in only:
            page.get(f"{base}/?passed=no")
            page.find_element(By.CSS_SELECTOR, "tr.verdict td:nth-child(2) a").click()
            save(page, args.out / "explorer-request.png", whole=False)
            saved.append("explorer-request.png")
        if "agreement" in only:

            def joined() -> bool:
                page.get(agent_page)
                return joined_runs(page) >= len(labelled)

            wait_until(
                joined,
                JOIN_WAIT_S,
                # the count last: the message keeps its end
                lambda: f"{worker.tail()}\n{joined_runs(page)} of {len(labelled)} runs joined",
            )
            print(f"agreement: {joined_runs(page)} runs with outcomes")
            capture_element(page, args.out / "explorer-agreement.png", "agreement-section")
            saved.append("explorer-agreement.png")
        print(f"saved to {args.out}: {', '.join(saved)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
