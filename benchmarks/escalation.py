"""Steer before stopping, replayed on every labelled set through the worker's own handlers.

    python -m benchmarks.escalation [--data DIR] [--set NAME]

Each set is replayed twice with default settings and no budgets (`tracejudge replay`'s engine):
- before: every loop's first crossing stops the run (`loop_action = "stop"`, the old default);
- after: the defaults (a first crossing steers; a stop only when the same rule crosses again
  after the steer and the run is longer than its agent's runs usually are).
The agents' normal is learned as a deployed worker holds it: the set is replayed once first
under other request ids (a warm-up whose interventions are not counted), so each agent has its
baseline when its runs are judged. Printed per set and policy: ok and failed runs steered and
stopped, ok runs given any intervention that is not a steer, the steps not spent after a stop,
and for the runs that ended at their cost limit (the coding set) how many were stopped and the
share of their steps saved. Reads ../shared/data; a clone lacks it (`--data tests/data`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.agreement import labelled_sets
from benchmarks.data import SHARED_DATA, require
from tracejudge.judges.agreement.tally import label_ok
from tracejudge.settings import Settings
from tracejudge.streams.replay.engine import replay

WARM = "warm-up:"
STEP_TYPES = ("reasoning_step", "tool_call")


@dataclass(frozen=True)
class Run:
    ok: bool | None
    at_limit: bool
    steps: list[int]  # the step indexes of its reasoning steps and tool calls
    steers: int
    stopped_at: int | None  # the stop's step index

    @property
    def saved(self) -> int:
        return 0 if self.stopped_at is None else sum(s > self.stopped_at for s in self.steps)


def records(runs: dict[str, list[dict[str, Any]]]) -> list[tuple[bytes, bytes]]:
    """The warm-up copy, then the set itself, in file order each."""
    out = []
    for prefix in (WARM, ""):
        for rid, events in runs.items():
            for e in events:
                event = {**e, "request_id": prefix + rid}
                out.append(((prefix + rid).encode(), json.dumps(event).encode()))
    return out


def replayed(
    runs: dict[str, list[dict[str, Any]]], labels: dict[str, Any], policy: str
) -> list[Run]:
    with tempfile.TemporaryDirectory() as folder:
        budgets = Path(folder) / "budgets.toml"
        budgets.write_text(f'[default]\nloop_action = "{policy}"\n')
        settings = Settings(llm_judge_enabled=False, redis_url="", budgets_file=str(budgets))
        result = asyncio.run(replay(settings, records(runs)))
    told: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for intervention in result.interventions:
        if intervention.get("kind") == "loop" and not intervention["request_id"].startswith(WARM):
            told[intervention["request_id"]].append(intervention)
    done = []
    for rid, events in runs.items():
        label = labels.get(rid)
        status = label.get("exit_status") if isinstance(label, dict) else None
        stops = [i["step_index"] for i in told[rid] if i["action"] == "stop"]
        done.append(
            Run(
                label_ok(label),
                status is not None and "exit_cost" in str(status),
                [e["step_index"] for e in events if e.get("type") in STEP_TYPES],
                sum(i["action"] == "steer" for i in told[rid]),
                min(stops) if stops else None,
            )
        )
    return done


def share(hits: int, n: int) -> str:
    return f"{hits}/{n} ({hits / n:.1%})" if n else "0/0"


def report(name: str, policy: str, done: list[Run]) -> list[str]:
    ok = [r for r in done if r.ok is True]
    failed = [r for r in done if r.ok is False]
    stopped = [r for r in done if r.stopped_at is not None]
    lines = [
        f"  {policy:<16} ok: steered {share(sum(r.steers > 0 for r in ok), len(ok))}, "
        f"stopped {share(sum(r.stopped_at is not None for r in ok), len(ok))} | failed: steered "
        f"{share(sum(r.steers > 0 for r in failed), len(failed))}, stopped "
        f"{share(sum(r.stopped_at is not None for r in failed), len(failed))}",
    ]
    if stopped:
        saved, total = sum(r.saved for r in stopped), sum(len(r.steps) for r in done)
        lines.append(
            f"  {'':<16} steps not spent: {saved} of all runs' {total} ({saved / total:.1%})"
        )
    limited = [r for r in done if r.at_limit]
    if limited:
        hit = [r for r in limited if r.stopped_at is not None]
        mean = sum(r.saved / len(r.steps) for r in hit) / len(hit) if hit else 0.0
        lines.append(
            f"  {'':<16} runs that ended at their cost limit: stopped "
            f"{share(len(hit), len(limited))}, their steps saved {mean:.0%} on average"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="folder of labelled sets")
    parser.add_argument("--set", action="append", help="only these sets (folder names)")
    args = parser.parse_args()
    require(args.data, "pass --data tests/data for the 40-run subset")
    logging.getLogger("tracejudge").setLevel(logging.WARNING)
    for folder in labelled_sets(args.data):
        if args.set and folder.name not in args.set:
            continue
        runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for line in (folder / "events.jsonl").read_text().splitlines():
            event = json.loads(line)
            runs[event["request_id"]].append(event)
        labels = json.loads((folder / "labels.json").read_text())
        ok = sum(label_ok(labels.get(r)) is True for r in runs)
        print(f"== {folder.name}: {len(runs)} runs ({ok} ok)", flush=True)
        for policy, label in (("stop", "before (stop)"), ("steer_then_stop", "after (steer)")):
            print("\n".join(report(folder.name, label, replayed(runs, labels, policy))), flush=True)


if __name__ == "__main__":
    main()
