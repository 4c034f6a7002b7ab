"""The loop rules replayed on every labelled set: which runs they would have stopped, and
what would not have been spent.

    python -m benchmarks.interventions [--data DIR] [--set NAME]

Each run's tool calls go, in order, through `judges/inflight/loops.py` with its default rules (no
budgets). A run is "stopped" at the first call that completes a rule; what comes after that
call is what would not have been spent:
- steps: the run's reasoning steps and tool calls after it;
- cost: the label's `instance_cost` (when the set has one) times the share of the run's model
  calls (reasoning steps) after it; the sets' events carry no per-call usage.
Printed per set: ok runs stopped and failed runs stopped (the label's `ok`, as
`benchmarks.agreement` reads it), the first rule of each stopped run, and for runs that ended at
their cost limit (labels whose `exit_status` names `exit_cost`: the coding set) the share
stopped and their steps saved. The goal on the coding set: a quarter of the runs that ended at
their cost limit stopped, with at least 30 % of their steps saved, and at most 1 % of ok runs
stopped. Reads ../shared/data; a clone lacks it (`--data tests/data` for the 40-run subset).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.agreement import labelled_sets
from benchmarks.data import SHARED_DATA, require
from tracejudge.judges.agreement.tally import label_ok
from tracejudge.judges.inflight.loops import LoopFound, LoopRules, LoopWatch

STEP_TYPES = ("reasoning_step", "tool_call")


@dataclass(frozen=True)
class Replayed:
    ok: bool | None
    at_limit: bool | None  # None: the set's labels do not say
    steps: int
    found: LoopFound | None
    steps_after: int  # steps after the call that completed the rule
    model_calls: int
    model_calls_after: int
    cost: float | None


def replay_run(events: list[dict[str, Any]], label: Any, rules: LoopRules) -> Replayed:
    watch = LoopWatch(rules)
    found: LoopFound | None = None
    steps = model_calls = steps_after = model_after = 0
    for e in events:
        kind = e.get("type")
        if kind not in STEP_TYPES:
            continue
        steps += 1
        model_calls += kind == "reasoning_step"
        if found is not None:
            steps_after += 1
            model_after += kind == "reasoning_step"
            continue
        if kind == "tool_call":
            crossed = watch.observe(
                e["tool"],
                e.get("args_summary"),
                bool(e.get("success")),
                e.get("result_preview"),
                e.get("error"),
            )
            found = crossed[0] if crossed else None
    status = label.get("exit_status") if isinstance(label, dict) else None
    cost = label.get("instance_cost") if isinstance(label, dict) else None
    return Replayed(
        label_ok(label),
        None if status is None else "exit_cost" in str(status),
        steps,
        found,
        steps_after,
        model_calls,
        model_after,
        float(cost) if isinstance(cost, int | float) else None,
    )


def share(hits: int, n: int) -> str:
    return f"{hits}/{n} ({hits / n:.1%})" if n else "0/0"


def run_set(folder: Path, rules: LoopRules) -> list[str]:
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with (folder / "events.jsonl").open() as lines:
        for line in lines:
            event = json.loads(line)
            runs[event["request_id"]].append(event)
    labels = json.loads((folder / "labels.json").read_text())
    done = [replay_run(events, labels.get(rid), rules) for rid, events in runs.items()]
    ok = [r for r in done if r.ok is True]
    failed = [r for r in done if r.ok is False]
    stopped = [r for r in done if r.found is not None]
    out = [
        f"== {folder.name}: {len(done)} runs ({len(ok)} ok, {len(failed)} failed)",
        f"  ok runs stopped      {share(sum(r.found is not None for r in ok), len(ok))}",
        f"  failed runs stopped  {share(sum(r.found is not None for r in failed), len(failed))}",
        "  first rule of the stopped runs: "
        + (
            ", ".join(
                f"{k} {n}"
                for k, n in Counter(r.found.kind for r in stopped if r.found).most_common()
            )
            or "none"
        ),
    ]
    if stopped:
        steps = sum(r.steps_after for r in stopped)
        total = sum(r.steps for r in stopped)
        out.append(
            f"  steps not spent: {steps} of the stopped runs' {total} ({steps / total:.0%}); "
            f"of all runs' {sum(r.steps for r in done)} ({steps / sum(r.steps for r in done):.1%})"
        )
        costed = [r for r in stopped if r.cost is not None and r.model_calls]
        if costed:
            saved = sum(r.cost * r.model_calls_after / r.model_calls for r in costed if r.cost)
            spent = sum(r.cost for r in done if r.cost is not None)
            out.append(
                f"  cost not spent (estimated): {saved:.2f} of {spent:.2f} ({saved / spent:.1%})"
            )
    limited = [r for r in done if r.at_limit]
    if limited:
        hit = [r for r in limited if r.found is not None]
        mean = sum(r.steps_after / r.steps for r in hit) / len(hit) if hit else 0.0
        ok_share = sum(r.found is not None for r in ok) / len(ok) if ok else 0.0
        met = len(hit) >= len(limited) / 4 and mean >= 0.30 and ok_share <= 0.01
        out.append(
            f"  runs that ended at their cost limit: stopped {share(len(hit), len(limited))}, "
            f"their steps saved {mean:.0%} on average; goal (>= 25 %, >= 30 %, ok <= 1 %): "
            f"{'met' if met else 'NOT met'}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="folder of labelled sets")
    parser.add_argument("--set", action="append", help="only these sets (folder names)")
    args = parser.parse_args()
    require(args.data, "pass --data tests/data for the 40-run subset")
    rules = LoopRules()
    print(
        f"loop rules: repeat {rules.repeat}, cycles {rules.cycles}, same failure "
        f"{rules.same_failure}, no new result {rules.no_new_result}; no budgets"
    )
    for folder in labelled_sets(args.data):
        if args.set and folder.name not in args.set:
            continue
        print("\n".join(run_set(folder, rules)))


if __name__ == "__main__":
    main()
