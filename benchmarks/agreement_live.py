"""Live agreement on the shared labelled sets, across a worker's kill -9: the live figures
equal those computed offline from the same verdicts and labels.

    python -m benchmarks.agreement_live [--data DIR] [--set NAME] [--setting NAME=VALUE]
        [--outcomes-right-after] [--timeout-s 300] [--check]

Starts the real Kafka and Redis (or TRACEJUDGE_KAFKA_BOOTSTRAP's / TRACEJUDGE_REDIS_URL's) and,
per set under ../shared/data (benchmarks/data.py: a folder with `events.jsonl` and
`labels.json`), a real `tracejudge worker` (rules only, `--setting`s added; topics and
agreement keys under a prefix of their own). The set's events are published; once every run's
final evaluation is on the evaluations topic and the worker has committed the events (an
outcome comes after its verdict is acknowledged; `--outcomes-right-after` does not wait), an
outcome from each run's label (read as `tracejudge agreement` reads it:
streams/replay/labels.py) is published, in a shuffled order, half of them first; once some of
those are joined the other half is published and the worker is killed with -9 at once, then
started again. When every outcome is counted (or the time is up), the figures per agent are
read five ways:
- live, store: the tally in Redis (`RedisAgreementStore.tally`), as every worker serves it;
- live, status: `tracejudge status --json`'s agreement, as a user reads it;
- offline: the last final evaluation of each run, read back from the evaluations topic, with
  its label, through `kept_of` + `cells` + `Tally`: what a test computes from the same verdicts;
- command, published: `tracejudge agreement --evaluations FILE --labels LABELS --json`, FILE
  written by `tracejudge tail evaluations --json --from-beginning` (as a user makes it);
- command, replayed: `tracejudge agreement EVENTS --labels LABELS --json` (the set
  re-evaluated offline, under the same settings).
Each is compared with the store's (counts exact, AUC within 0.005). Outcomes: published,
pairs counted in Redis, counted twice (cells beyond the distinct pairs), lost (published, never
counted), and the restarted worker's counters. Then why the replayed command may differ: the
runs whose live verdict is not the one an in-process replay makes, and how. The replayed
command is reported, not checked: the per-agent baselines learn from the runs closed before,
which a replay closes in file order and the worker in the order its partitions come, so a few
verdicts differ by design; the published command reads the worker's own verdicts and must be
equal.

Killed before it committed the events, the restarted worker reads them again and publishes
those runs' verdicts again, made anew: with the agent's baseline and calibration as they are
then (`--outcomes-right-after` shows it). The store then counts the new verdict in place of
the old (the last is the one kept). `--check` exits 1 on any mismatch, any outcome counted
twice or lost, or a set not done in time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from benchmarks.agreement import labelled_sets
from benchmarks.data import SHARED_DATA, require
from tests.integration.harness import (
    WorkerProcess,
    grouped,
    key_value_lines,
    produce,
    produce_events,
    worker_env,
)
from tests.realservices import ROOT, start_kafka, start_redis
from tracejudge.judges.agreement.tally import Kept, Tally, cells, kept_of
from tracejudge.models.outputs import Evaluation
from tracejudge.settings import Settings
from tracejudge.streams.agreement.report import agreement_json
from tracejudge.streams.agreement.store import RedisAgreementStore, keys_of
from tracejudge.streams.replay.engine import lines_of, replay
from tracejudge.streams.replay.labels import Labelled, read_labels

RULES_ONLY = {"llm_judge_enabled": "false"}
AUC_TOLERANCE = 0.005  # live = offline: AUC within 0.005, counts exact
READINGS = ("live, store", "live, status", "offline", "command, published", "command, replayed")
# compared by --check; the replayed command's verdicts are not the worker's (module docstring)
CHECKED = ("live, status", "offline", "command, published")
SHARES = ("ok_alerted", "failed_flagged", "alert_precision")


def request_ids(events: Path) -> list[str]:
    """The runs of a set, in the order they first come."""
    found: dict[str, None] = {}
    for line in events.read_bytes().splitlines():
        if line.strip():
            found.setdefault(json.loads(line)["request_id"], None)
    return list(found)


def outcome_events(rows: Iterable[Labelled]) -> list[dict[str, Any]]:
    now = time.time()
    return [
        {
            "type": "outcome",
            "request_id": row.request_id,
            "ok": row.truth.ok,
            "source": row.truth.source,
            "ts": now,
        }
        for row in rows
    ]


@dataclass
class Counted:
    cells: int  # rules cells in the tally: one per pair counted, however often
    pairs: int  # distinct (request, source) pairs stored


async def counted(redis: aioredis.Redis, store: RedisAgreementStore) -> Counted:
    tally = await store.tally()
    total = sum(n for c, n in tally.counts.items() if c.view == "rules")
    pairs = 0
    async for _ in redis.scan_iter(match=f"{store.prefix}pair:*", count=1000):
        pairs += 1
    return Counted(total, pairs)


def row(figures: dict[str, Any]) -> dict[str, Any]:
    """The compared figures of one `Figures.as_dict()`."""
    return {
        "runs": figures["runs"],
        "ok": figures["ok_runs"],
        "failed": figures["failed_runs"],
        "auc": figures["auc"],
        **{name: (figures[name]["hits"], figures[name]["count"]) for name in SHARES},
    }


def equal(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return False
    if (a["auc"] is None) != (b["auc"] is None):
        return False
    if a["auc"] is not None and abs(a["auc"] - b["auc"]) > AUC_TOLERANCE:
        return False
    return all(a[k] == b[k] for k in a if k != "auc")


@dataclass
class SetRun:
    name: str
    runs: int = 0
    outcomes: int = 0  # published (labels understood)
    not_understood: int = 0
    no_final: int = 0  # runs without a final evaluation
    republished: int = 0  # runs with more than one final evaluation
    several_finals: int = 0  # runs whose final evaluations differ
    joined_at_kill: int = 0  # the first worker's outcomes_joined just before the kill
    counted: Counted = field(default_factory=lambda: Counted(0, 0))
    restarted: dict[str, int] = field(default_factory=dict)  # its outcomes_* counters
    tallies_equal: bool = False  # the store's cells are the offline ones, exactly
    figures: dict[str, dict[str, dict[str, Any] | None]] = field(default_factory=dict)
    timed_out: bool = False
    replay_differs: int = 0  # runs whose live verdict is not the command's replayed one
    evaluations_tailed: int = 0  # lines `tracejudge tail evaluations --json` wrote
    differences: list[str] = field(default_factory=list)  # which, and how
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def twice(self) -> int:
        return max(0, self.counted.cells - self.counted.pairs)

    @property
    def lost(self) -> int:
        return max(0, self.outcomes - self.counted.pairs)

    def mismatches(self) -> list[str]:
        found = []
        for agent, by in self.figures.items():
            for reading in CHECKED:
                if not equal(by["live, store"], by.get(reading)):
                    found.append(f"{agent}: {reading} differs from the live store")
        if not self.tallies_equal:
            found.append("the store's cells are not the offline cells")
        if self.twice or self.lost or self.timed_out or self.no_final:
            found.append(
                f"twice {self.twice}, lost {self.lost}, no final {self.no_final}, "
                f"timed out {self.timed_out}"
            )
        return found


def kept_without_time(evaluation: dict[str, Any]) -> Kept:
    return replace(kept_of(Evaluation.model_validate(evaluation)), ts=0.0)


def shown(kept: Kept | None) -> str:
    if kept is None:
        return "none"
    r = kept.rules
    flags = ("alerted " if r.alerted else "") + ("flagged " if r.flagged else "")
    return f"[{r.score} {flags}{','.join(kept.findings) or 'no findings'}]"


def figures_by_agent(tally: Tally) -> dict[str, dict[str, Any]]:
    return {agent: row(entry["final"]) for agent, entry in agreement_json(tally).items()}


def offline_settings(overrides: dict[str, str]) -> dict[str, str]:
    """The worker's verdict settings, offline: no Redis (a replay keeps nothing there)."""
    return {**RULES_ONLY, **overrides, "redis_url": ""}


def clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without its TRACEJUDGE_ settings, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEJUDGE_")}
    return {**env, **settings}


def cli(args: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def status_figures(worker: WorkerProcess) -> dict[str, dict[str, Any]]:
    url = f"http://127.0.0.1:{worker.settings.web_port}"
    done = cli(["status", "--json", "--worker", url], clean_env(**worker.env), 60)
    found = json.loads(done.stdout).get("agreement") or {}
    return {agent: row(entry["final"]) for agent, entry in found.items()}


def command_figures(
    verdicts: list[str], labels: Path, overrides: dict[str, str], timeout_s: float
) -> dict[str, dict[str, Any]]:
    """`tracejudge agreement VERDICTS --labels LABELS --json`, under the worker's verdict
    settings (rules only); VERDICTS: the events file, or `--evaluations FILE`."""
    env = clean_env(
        **{f"TRACEJUDGE_{k.upper()}": v for k, v in offline_settings(overrides).items()}
    )
    args = ["agreement", *verdicts, "--labels", str(labels)]
    done = cli([*args, "--json"], env, timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"tracejudge agreement exited {done.returncode}: {done.stderr[-2000:]}")
    found: dict[str, dict[str, Any]] = {}
    for block in json.loads(done.stdout)["blocks"]:
        views = block["views"]
        found[block["agent"]] = row(views.get("final", views["rules"]))
    return found


def tail_evaluations(worker: WorkerProcess, path: Path) -> int:
    """The evaluations topic as a user saves it; how many evaluations it wrote."""
    args = ["tail", "evaluations", "--json", "--from-beginning", "--idle-exit", "5"]
    done = cli(args, clean_env(**worker.env), 120)
    if done.returncode != 0:
        raise RuntimeError(f"tracejudge tail exited {done.returncode}: {done.stderr[-2000:]}")
    path.write_text(done.stdout)
    return sum(1 for line in done.stdout.splitlines() if line.strip())


async def wait_committed(worker: WorkerProcess, deadline: float) -> None:
    """Until the worker's group has committed the events topic up to its end as it is now."""
    topic = worker.topic("events")
    consumer = AIOKafkaConsumer(bootstrap_servers=worker.settings.kafka_bootstrap)
    admin = AIOKafkaAdminClient(bootstrap_servers=worker.settings.kafka_bootstrap)
    await consumer.start()
    await admin.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(worker.settings.partitions)]
        ends = await consumer.end_offsets(parts)
        while time.monotonic() < deadline:
            done = await admin.list_consumer_group_offsets(worker.settings.app_id)
            if all(tp in done and done[tp].offset >= ends[tp] for tp in parts):
                return
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
        await consumer.stop()


async def wait_joined(worker: WorkerProcess, count: int, deadline: float) -> int:
    joined = 0
    while time.monotonic() < deadline:
        joined = worker.health()[1].get("counters", {}).get("outcomes_joined", 0)
        if joined >= count:
            break
        await asyncio.sleep(0.02)
    return joined


async def run_set(
    folder: Path,
    kafka: str,
    redis_url: str,
    workdir: Path,
    timeout_s: float,
    overrides: dict[str, str],
    right_after: bool = False,
) -> SetRun:
    result = SetRun(folder.name)
    deadline = time.monotonic() + timeout_s
    rids = request_ids(folder / "events.jsonl")
    labels = read_labels(folder / "labels.json")
    latest = {(r.request_id, r.truth.source): r for r in labels.rows}  # a later one replaces
    rows = list(latest.values())
    random.Random(39).shuffle(rows)  # agents and outcomes mixed, the same order every run
    result.runs, result.outcomes = len(rids), len(rows)
    result.not_understood = labels.not_understood
    env = worker_env(
        kafka, redis_url, workdir, f"agreement-{folder.name}", **{**RULES_ONLY, **overrides}
    )
    worker = WorkerProcess(env, workdir / f"worker-{folder.name}.log").start()
    redis = aioredis.from_url(redis_url)
    store = RedisAgreementStore(redis, 7 * 86400, prefix=keys_of(worker.settings.topic_prefix))
    try:
        started = time.monotonic()
        await produce(kafka, worker.topic("events"), key_value_lines(folder / "events.jsonl"))
        finals = await grouped(
            worker,
            "evaluations",
            set(rids),
            wait_for_all=True,
            timeout_s=max(1.0, deadline - time.monotonic()),
        )
        result.seconds["events to final verdicts"] = time.monotonic() - started
        result.no_final = sum(1 for rid in rids if not finals[rid])
        if not right_after:
            # an outcome comes after its verdict is acknowledged (the events committed): with
            # the kill before that, the restarted worker reads the requests again and
            # publishes their verdicts again, made anew (see the module's docstring)
            await wait_committed(worker, deadline)
        result.seconds["events to committed"] = time.monotonic() - started
        # the outcomes: half, some of them joined, then the rest and the kill at once
        events = outcome_events(rows)
        half = len(events) // 2
        started = time.monotonic()
        await produce_events(kafka, worker.topic("events"), events[:half])
        await wait_joined(worker, half // 2, deadline)
        await produce_events(kafka, worker.topic("events"), events[half:])
        result.joined_at_kill = worker.health()[1].get("counters", {}).get("outcomes_joined", 0)
        worker.kill9()
        worker.start()
        while time.monotonic() < deadline:
            result.counted = await counted(redis, store)
            if result.counted.pairs >= result.outcomes:
                break
            await asyncio.sleep(0.2)
        else:
            result.timed_out = True
        result.seconds["outcomes to all counted (kill and restart in it)"] = (
            time.monotonic() - started
        )
        await asyncio.sleep(2.0)  # an outcome counted twice would show by now
        result.counted = await counted(redis, store)
        live = await store.tally()
        counters = worker.health()[1].get("counters", {})
        result.restarted = {k: v for k, v in counters.items() if k.startswith("outcomes_")}
        status = status_figures(worker)
        # the same final evaluations, read back after it all (a verdict published again after
        # the kill would be here too): the last of each run
        finals = await grouped(
            worker, "evaluations", set(rids), wait_for_all=True, settle_s=3.0, timeout_s=60
        )
    finally:
        worker.stop()
        await redis.aclose()
    published = workdir / f"evaluations-{folder.name}.jsonl"
    result.evaluations_tailed = await asyncio.to_thread(tail_evaluations, worker, published)
    offline = Tally()
    for rid, values in finals.items():
        # what a verdict keeps for its outcome, its time aside: a verdict published again
        # is the same verdict
        seen = [kept_without_time(v) for v in values]
        result.republished += len(values) > 1
        if len(set(seen)) > 1:
            result.several_finals += 1
            result.differences.append(f"{rid}: finals {' then '.join(map(shown, seen))}")
    for labelled in rows:
        last = finals.get(labelled.request_id) or []
        if last:
            offline.add(cells(kept_of(Evaluation.model_validate(last[-1])), labelled.truth))
    result.tallies_equal = live.counts == offline.counts
    labels_file = folder / "labels.json"
    started = time.monotonic()
    from_published = command_figures(["--evaluations", str(published)], labels_file, overrides, 120)
    result.seconds["tracejudge agreement --evaluations"] = time.monotonic() - started
    started = time.monotonic()
    replayed_command = command_figures(
        [str(folder / "events.jsonl")],
        labels_file,
        overrides,
        max(60.0, deadline - time.monotonic() + 120),
    )
    result.seconds["tracejudge agreement EVENTS"] = time.monotonic() - started
    # why the command may differ: each run's verdict, live (the last final) and replayed
    replayed = await replay(
        Settings.model_validate(offline_settings(overrides)),
        lines_of((folder / "events.jsonl").read_bytes()),
    )
    for rid, values in finals.items():
        again = replayed.evaluations.get(rid)
        live_kept = kept_without_time(values[-1]) if values else None
        again_kept = None if again is None else kept_without_time(again)
        if live_kept != again_kept:
            result.replay_differs += 1
            result.differences.append(f"{rid}: live {shown(live_kept)}, replay {shown(again_kept)}")
    readings = {
        "live, store": figures_by_agent(live),
        "live, status": status,
        "offline": figures_by_agent(offline),
        "command, published": from_published,
        "command, replayed": replayed_command,
    }
    for agent in sorted({a for found in readings.values() for a in found}):
        result.figures[agent] = {name: found.get(agent) for name, found in readings.items()}
    return result


def cell_text(figures: dict[str, Any] | None) -> list[str]:
    if figures is None:
        return ["-"] * 6

    def share(name: str) -> str:
        hits, count = figures[name]
        return f"{hits}/{count} ({100 * hits / count:.1f} %)" if count else "-"

    auc = "-" if figures["auc"] is None else f"{figures['auc']:.4f}"
    return [
        str(figures["runs"]),
        f"{figures['ok']} / {figures['failed']}",
        auc,
        *(share(name) for name in SHARES),
    ]


def render(result: SetRun) -> list[str]:
    lines = [
        f"== {result.name}: {result.runs} runs, {result.outcomes} outcomes published "
        f"({result.not_understood} labels not understood: no outcome)",
        "| agent | reading | runs | ok / failed | AUC | ok alerted | failed flagged "
        "| alert precision | = live store |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for agent, by in result.figures.items():
        live = by["live, store"]
        for reading in READINGS:
            mark = "" if reading == "live, store" else "yes" if equal(live, by[reading]) else "NO"
            if reading not in CHECKED and mark == "NO":
                mark = "no (not checked)"
            lines.append(
                f"| {agent} | {reading} | " + " | ".join(cell_text(by[reading])) + f" | {mark} |"
            )
    c = result.counted
    lines += [
        f"outcomes: published {result.outcomes}, pairs counted {c.pairs} (cells {c.cells}), "
        f"counted twice {result.twice}, lost {result.lost}; joined before the kill "
        f"{result.joined_at_kill}; the restarted worker: "
        + ", ".join(f"{k[len('outcomes_') :]} {v}" for k, v in sorted(result.restarted.items())),
        f"evaluations saved by `tracejudge tail evaluations --json`: {result.evaluations_tailed}",
        f"store cells = offline cells: {'yes' if result.tallies_equal else 'NO'}; runs without "
        f"a final verdict {result.no_final}; runs whose verdict was published again "
        f"{result.republished}, differently {result.several_finals}",
        "time: " + ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items()),
    ]
    lines.append(
        f"runs whose live verdict differs from the replayed one (tracejudge agreement EVENTS, "
        f"not checked: the baselines learn in the order runs close): {result.replay_differs}"
    )
    lines += [f"  {d}" for d in result.differences[:20]]
    if result.timed_out:
        lines.append("TIMED OUT before every outcome was counted")
    return lines


async def main(
    data: Path,
    names: list[str] | None,
    timeout_s: float,
    overrides: dict[str, str],
    right_after: bool,
) -> list[SetRun]:
    workdir = Path(tempfile.mkdtemp(prefix="tracejudge-agreement-live-"))
    kafka = start_kafka(workdir / "kafka")
    redis = start_redis(workdir / "redis")
    results = []
    try:
        for folder in labelled_sets(data):
            if names and folder.name not in names:
                continue
            results.append(
                await run_set(
                    folder, kafka.address, redis.address, workdir, timeout_s, overrides, right_after
                )
            )
            print("\n".join(render(results[-1])), flush=True)
    finally:
        kafka.stop()
        redis.stop()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="folder of labelled sets")
    parser.add_argument("--set", action="append", help="only these sets (folder names)")
    parser.add_argument(
        "--timeout-s", type=float, default=300.0, help="per set, the live part (300)"
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a verdict setting for the worker and the command alike, e.g. "
        "baseline_min_runs=1000000 (repeatable)",
    )
    parser.add_argument(
        "--outcomes-right-after",
        action="store_true",
        help="publish the outcomes as soon as the verdicts are out, before the worker has "
        "committed the events",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 on any mismatch")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.setting)
    require(args.data, "pass --data tests/data for the 40-run subset")
    # the in-process replay logs a line per evaluation, as the worker does: not wanted here
    for name in ("tracejudge.streams.worker", "tracejudge.streams.shared.outputs"):
        logging.getLogger(name).setLevel(logging.WARNING)
    print(
        "settings: rules only"
        + "".join(f", {k}={v}" for k, v in overrides.items())
        + (", outcomes right after the verdicts" if args.outcomes_right_after else "")
    )
    done = asyncio.run(
        main(args.data, args.set, args.timeout_s, overrides, args.outcomes_right_after)
    )
    problems = [f"{r.name}: {m}" for r in done for m in r.mismatches()]
    print(
        "\n".join(problems)
        if problems
        else "every checked reading (" + ", ".join(CHECKED) + ") equals the live store's"
    )
    sys.exit(1 if args.check and (problems or not done) else 0)
