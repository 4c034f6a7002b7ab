"""Calibrated alerts held out in time, on every labelled set under ../shared/data
(benchmarks/data.py).

    python -m benchmarks.calibration [--data DIR] [--set NAME] [--min-ok-runs N]
                                     [--min-failed-runs N]

Each set's runs in time order (the order of their first event: the sets' events carry no ts,
the file is the order they arrive in); per agent, its first half of runs are the past, its
second half the future. The past runs go through the worker's own handlers in memory (as
`tracejudge replay`), rules only; each past run's label becomes an outcome in the memory
agreement store (`kept_of` of its final evaluation, `Truth` of its label); the calibrations
are learned from that store's tally by the refresher the worker runs; then the future runs go
through the same handlers, so their verdicts are made with the calibrated thresholds. Beside
them, the same runs through a worker with calibration off (the default threshold).

Printed per set and target (5 %, 10 %): per agent the calibration (or why none), and on the
future runs the share of ok runs alerted (not passed) and of failed runs flagged (not passed,
not success, or incomplete), calibrated vs default. Then whether per-agent weights of the
findings would rank better: a logistic fit of the outcome on the findings (and on the findings
plus the score) on the past runs, its AUC on the future runs beside the score's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from benchmarks.agreement import labelled_sets
from benchmarks.data import SHARED_DATA, require
from tracejudge.judges.agreement.calibration import Calibration
from tracejudge.judges.agreement.tally import Truth, auc, kept_of, label_ok
from tracejudge.models import names
from tracejudge.models.agents import NO_AGENT
from tracejudge.models.outputs import Evaluation
from tracejudge.settings import Settings
from tracejudge.streams.agreement.calibrations import CalibrationRefresher
from tracejudge.streams.agreement.store import MemoryAgreementStore
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.replay.engine import CollectingChannel, MemoryLookup, lines_of
from tracejudge.streams.worker.context import Channels, Tables, WorkerContext

TARGETS = (0.05, 0.10)
GOAL_POINTS = 0.05  # the goal: the future's ok runs alerted within 5 points of the target
Record = tuple[bytes | None, bytes]


def _stop(reason: str, exc: BaseException) -> NoReturn:
    raise RuntimeError(reason) from exc


@dataclass
class Split:
    past: list[Record]
    future: list[Record]
    past_runs: list[str]
    future_runs: list[str]


def split_in_time(records: Sequence[Record]) -> Split:
    """Per agent, the first half of its runs (in the order they start) are the past."""
    runs: dict[str, list[Record]] = defaultdict(list)
    agent: dict[str, str] = {}
    for key, value in records:
        event = json.loads(value)
        rid = event["request_id"]
        runs[rid].append((key, value))
        agent.setdefault(rid, event.get("agent_name") or NO_AGENT)
    by_agent: dict[str, list[str]] = defaultdict(list)
    for rid in runs:  # dicts keep the order runs first appeared in
        by_agent[agent[rid]].append(rid)
    past = {rid for rids in by_agent.values() for rid in rids[: len(rids) // 2]}
    past_runs = [r for r in runs if r in past]
    future_runs = [r for r in runs if r not in past]
    return Split(
        [rec for r in past_runs for rec in runs[r]],
        [rec for r in future_runs for rec in runs[r]],
        past_runs,
        future_runs,
    )


class Worker:
    """The worker's handlers in memory, fed in parts (`tracejudge replay`'s engine, which
    feeds a file in one go)."""

    def __init__(self, settings: Settings) -> None:
        self.channels = Channels(*(CollectingChannel() for _ in range(8)))
        self.ctx = WorkerContext.build(
            settings, self.channels, Tables({}, {}, {}), None, lookup=MemoryLookup(), exit=_stop
        )
        self.ctx.partitions.observe({p: 0 for p in range(settings.partitions)}, {})
        self.topic = settings.topic(names.EVENTS)
        self.count = 0

    async def feed(self, records: Sequence[Record]) -> dict[str, dict[str, Any]]:
        start = len(self.evaluations_sent())
        for key, value in records:
            self.count += 1
            record = InRecord(self.topic, 0, self.count, key or b"", value, {})
            await self.ctx.errors.run(record, self.ctx.events)
        for rid in list(self.ctx.store.open):  # what is still open closes as idle would
            await self.ctx.events.closer.close(rid, "idle_timeout")
        return {e["request_id"]: e for e in self.evaluations_sent()[start:]}

    def evaluations_sent(self) -> list[dict[str, Any]]:
        channel = self.channels.evaluations
        assert isinstance(channel, CollectingChannel)
        return channel.values()


def alerted(e: Mapping[str, Any]) -> bool:
    return not e["passed"]


def flagged(e: Mapping[str, Any]) -> bool:
    return not e["passed"] or not e["success"] or e["incomplete"]


def share(runs: list[str], evaluations: Mapping[str, Mapping[str, Any]], hit: Any) -> str:
    if not runs:
        return "   n/a"
    hits = sum(1 for r in runs if hit(evaluations[r]))
    return f"{hits / len(runs):6.1%} ({hits}/{len(runs)})"


async def calibrated_run(
    split: Split, labels: Mapping[str, bool], settings: Settings
) -> tuple[list[Calibration], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The past through the worker, its outcomes into the store, the refresher, the future."""
    worker = Worker(settings)
    past = await worker.feed(split.past)
    store = MemoryAgreementStore()
    for rid, e in past.items():
        if rid in labels:
            await store.keep(rid, kept_of(Evaluation.model_validate(e)))
            await store.outcome(rid, Truth(labels[rid], "label"), e["ts"])
    refresher = CalibrationRefresher(
        store, worker.ctx.calibration_book, settings.calibration_rule()
    )
    assert await refresher.refresh()
    future = await worker.feed(split.future)
    return list(worker.ctx.calibration_book.by_agent.values()), past, future


# -- per-agent weights of the findings: would they rank better? ------------------------------


def logistic_fit(x: np.ndarray, y: np.ndarray, ridge: float = 1.0) -> np.ndarray:
    """L2-penalised logistic regression by Newton's method (at most 50 steps)."""
    x1 = np.hstack([np.ones((len(x), 1)), x])
    w = np.zeros(x1.shape[1])
    penalty = ridge * np.eye(x1.shape[1])
    penalty[0, 0] = 0.0  # the intercept is not shrunk
    for _ in range(50):
        p = 1 / (1 + np.exp(-(x1 @ w)))
        gradient = x1.T @ (p - y) + penalty @ w
        hessian = x1.T @ (x1 * (p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def features(
    evaluations: Mapping[str, Mapping[str, Any]], runs: list[str], rules: list[str], score: bool
) -> np.ndarray:
    rows = []
    for r in runs:
        fired = {f["rule"] for f in evaluations[r]["findings"]}
        row = [1.0 if rule in fired else 0.0 for rule in rules]
        if score:
            row.append(evaluations[r]["overall_score"] / 100)
        rows.append(row)
    return np.array(rows, dtype=float).reshape(len(runs), len(rules) + int(score))


def weights_vs_score(
    past: Mapping[str, Mapping[str, Any]],
    future: Mapping[str, Mapping[str, Any]],
    labels: Mapping[str, bool],
) -> list[str]:
    """Held-out AUC of the score, of a fit on the findings, and of one on findings + score."""
    train = [r for r in past if r in labels]
    test = [r for r in future if r in labels]
    rules = sorted({f["rule"] for r in train for f in past[r]["findings"]})
    y_test = {r: labels[r] for r in test}
    lines = [
        f"  held-out AUC: score {auc({r: future[r]['overall_score'] for r in test}, y_test):.3f}"
    ]
    y = np.array([1.0 if labels[r] else 0.0 for r in train])
    for name, with_score in (("findings", False), ("findings + score", True)):
        w = logistic_fit(features(past, train, rules, with_score), y)
        x = features(future, test, rules, with_score)
        scores = dict(zip(test, (w[0] + x @ w[1:]).tolist(), strict=True))
        lines.append(f"    logistic fit on the past, {name:<17} {auc(scores, y_test):.3f}")
    return lines


def run_set(folder: Path, settings: Settings) -> list[str]:
    records = lines_of((folder / "events.jsonl").read_bytes())
    raw = json.loads((folder / "labels.json").read_text())
    labels = {r: lab for r, v in raw.items() if (lab := label_ok(v)) is not None}
    split = split_in_time(records)
    default = Worker(settings.model_copy(update={"calibration_enabled": False}))
    asyncio.run(default.feed(split.past))
    plain = asyncio.run(default.feed(split.future))
    past_labelled = [r for r in split.past_runs if r in labels]
    out = [
        f"== {folder.name}: {len(split.past_runs)} past runs ({len(past_labelled)} with "
        f"outcomes), {len(split.future_runs)} future runs"
    ]
    past_ok = sum(1 for r in past_labelled if labels[r])
    out.append(
        f"  past ok outcomes, all agents together: {past_ok} (the +1 rule alone needs "
        + ", ".join(f"{math.ceil(1 / t - 1 - 1e-9)} at {t:.0%}" for t in TARGETS)
        + ")"
    )
    future_ok = [r for r in split.future_runs if labels.get(r) is True]
    future_failed = [r for r in split.future_runs if labels.get(r) is False]
    out.append(
        f"  default threshold {settings.warn_threshold}: ok alerted "
        f"{share(future_ok, plain, alerted)}, failed flagged {share(future_failed, plain, flagged)}"
    )
    past: dict[str, dict[str, Any]] = {}
    for target in TARGETS:
        tuned = settings.model_copy(update={"calibration_target": target})
        found, past, future = asyncio.run(calibrated_run(split, labels, tuned))
        by_agent = {c.agent: c for c in found}
        out.append(f"  target {target:.0%}:")
        agents = sorted({(future[r]["agent_name"] or NO_AGENT) for r in split.future_runs})
        for agent in agents:
            c = by_agent.get(agent)
            runs = [r for r in split.future_runs if (future[r]["agent_name"] or NO_AGENT) == agent]
            ok = [r for r in runs if labels.get(r) is True]
            failed = [r for r in runs if labels.get(r) is False]
            if c is None:
                n_ok = sum(
                    1 for r in split.past_runs if labels.get(r) is True and _of(past, r) == agent
                )
                n_failed = sum(
                    1 for r in split.past_runs if labels.get(r) is False and _of(past, r) == agent
                )
                # the +1 rule (judges/agreement/calibration.py) needs 1/target - 1 ok runs at least,
                # whatever the minimums: with fewer, no threshold keeps the promise
                needed = max(tuned.calibration_min_ok_runs, math.ceil(1 / target - 1 - 1e-9))
                out.append(
                    f"    {agent}: no calibration ({n_ok} ok, {n_failed} failed past outcomes; "
                    f"a {target:.0%} target needs {needed} ok and "
                    f"{tuned.calibration_min_failed_runs} failed)"
                )
                continue
            value = sum(1 for r in ok if alerted(future[r])) / len(ok) if ok else float("nan")
            met = abs(value - target) <= GOAL_POINTS
            out.append(
                f"    {agent}: threshold {c.threshold} (from {c.ok_runs} ok, {c.failed_runs} "
                f"failed) ok alerted {share(ok, future, alerted)} "
                f"[{'within' if met else 'NOT within'} 5 points]; failed flagged "
                f"{share(failed, future, flagged)}; default: {share(ok, plain, alerted)} / "
                f"{share(failed, plain, flagged)}"
            )
        all_ok = future_ok
        out.append(
            f"    all future runs: ok alerted {share(all_ok, future, alerted)}, failed flagged "
            f"{share(future_failed, future, flagged)}"
        )
    out.extend(weights_vs_score(past, plain, labels))
    return out


def _of(evaluations: Mapping[str, Mapping[str, Any]], rid: str) -> str | None:
    e = evaluations.get(rid)
    return None if e is None else e["agent_name"] or NO_AGENT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="folder of labelled sets")
    parser.add_argument("--set", action="append", help="only these sets (folder names)")
    parser.add_argument("--min-ok-runs", type=int, default=None)
    parser.add_argument("--min-failed-runs", type=int, default=None)
    args = parser.parse_args()
    require(args.data, "pass --data tests/data for the 40-run subset")
    logging.getLogger("tracejudge.streams.worker").setLevel(logging.WARNING)
    overrides: dict[str, Any] = {"llm_judge_enabled": False, "redis_url": ""}
    if args.min_ok_runs is not None:
        overrides["calibration_min_ok_runs"] = args.min_ok_runs
    if args.min_failed_runs is not None:
        overrides["calibration_min_failed_runs"] = args.min_failed_runs
    settings = Settings(**overrides)
    print(
        f"rules only; calibration minimums {settings.calibration_min_ok_runs} ok, "
        f"{settings.calibration_min_failed_runs} failed"
    )
    for folder in labelled_sets(args.data):
        if args.set and folder.name not in args.set:
            continue
        print("\n".join(run_set(folder, settings)), flush=True)


if __name__ == "__main__":
    main()
