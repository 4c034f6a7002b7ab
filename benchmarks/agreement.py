"""How the verdicts agree with ground truth, on every labelled set under ../shared/data
(benchmarks/data.py; `--data` for another folder of sets).

    python -m benchmarks.agreement [--data DIR] [--set NAME] [--max-trace-steps N]

Each set (a folder with `events.jsonl` and `labels.json`) is replayed through the worker's own
handlers, as `tracejudge replay` does: the same windows, step limit, baselines learned in the
order the runs come, rules only. Per set it prints the AUC of `overall_score` against the label,
the ok runs alerted (`passed` false) and sent to reflection (`incomplete`), the failed runs
flagged (not passed, not success or incomplete), and per rule how often it fired on ok and on
failed runs (the table of `tracejudge agreement`, judges/agreement/rule_rates.py). A rule
whose rate on ok runs reaches 80 % of its rate on failed runs tells nothing about the outcome:
the last column says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.data import SHARED_DATA, require
from tracejudge.judges.agreement.rule_rates import RuleRate, rule_rates, rule_table
from tracejudge.judges.agreement.tally import auc, label_ok
from tracejudge.models.events import STEP_TYPES, parse_event
from tracejudge.models.window import Window, assemble_window
from tracejudge.settings import Settings
from tracejudge.streams.replay.engine import lines_of, replay

# The bars the verdicts are held to, printed beside the figures
OK_ALERTED_MAX = 0.15
OK_REFLECTED_MAX = 0.10
FAILED_FLAGGED_MIN = 0.50


def windows(path: Path, max_steps: int = 50) -> dict[str, Window]:
    """Each run's window as the worker builds it (steps after final_response are late), for
    benchmarks that judge windows directly."""
    events: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        event = json.loads(line)
        events[event["request_id"]].append(event)
    result = {}
    for rid, evs in events.items():
        parsed = []
        for e in evs:
            parsed.append(parse_event(e))
            if e["type"] == "final_response":
                break
        steps = sum(1 for event in parsed if event.type in STEP_TYPES)
        result[rid] = assemble_window(
            rid,
            parsed,
            closed_by="final_response",
            step_count=steps,
            steps_dropped=max(0, steps - max_steps),
        )
    return result


@dataclass(frozen=True)
class SetResult:
    name: str
    runs: int
    ok: int
    failed: int
    auc: float
    ok_alerted: float
    ok_reflected: float
    failed_flagged: float
    rules: list[RuleRate]  # the per-rule table, as `tracejudge agreement` prints it

    @property
    def meets(self) -> bool:
        return (
            self.ok_alerted <= OK_ALERTED_MAX
            and self.ok_reflected <= OK_REFLECTED_MAX
            and self.failed_flagged >= FAILED_FLAGGED_MIN
            and not self.useless_rules()
        )

    def useless_rules(self) -> list[str]:
        return [r.rule for r in self.rules if r.useless]


def score_set(
    name: str, evaluations: Mapping[str, Mapping[str, Any]], labels: Mapping[str, Any]
) -> SetResult:
    ok = {
        r: v for r, raw in labels.items() if (v := label_ok(raw)) is not None and r in evaluations
    }
    good = [r for r in ok if ok[r]]
    bad = [r for r in ok if not ok[r]]

    def rate(runs: list[str], hit: Any) -> float:
        return sum(1 for r in runs if hit(evaluations[r])) / len(runs) if runs else 0.0

    return SetResult(
        name=name,
        runs=len(ok),
        ok=len(good),
        failed=len(bad),
        auc=auc({r: float(evaluations[r]["overall_score"]) for r in ok}, ok),
        ok_alerted=rate(good, lambda e: not e["passed"]),
        ok_reflected=rate(good, lambda e: e["incomplete"]),
        failed_flagged=rate(bad, lambda e: not e["passed"] or not e["success"] or e["incomplete"]),
        rules=rule_rates(
            ((f["rule"] for f in evaluations[r].get("findings", [])), v) for r, v in ok.items()
        ),
    )


def run_set(folder: Path, settings: Settings) -> SetResult:
    records = lines_of((folder / "events.jsonl").read_bytes())
    result = asyncio.run(replay(settings, records))
    labels = json.loads((folder / "labels.json").read_text())
    return score_set(folder.name, result.evaluations, labels)


def render(result: SetResult) -> list[str]:
    def bar(value: float, limit: float, below: bool) -> str:
        met = value <= limit if below else value >= limit
        return f"{value:6.1%} ({'≤' if below else '≥'} {limit:.0%} {'ok' if met else 'MISSED'})"

    lines = [
        f"== {result.name}: {result.runs} labelled runs ({result.ok} ok, {result.failed} failed)",
        f"  AUC of overall_score        {result.auc:.3f}",
        f"  ok runs alerted             {bar(result.ok_alerted, OK_ALERTED_MAX, True)}",
        f"  ok runs sent to reflection  {bar(result.ok_reflected, OK_REFLECTED_MAX, True)}",
        f"  failed runs flagged         {bar(result.failed_flagged, FAILED_FLAGGED_MIN, False)}",
    ]
    lines += rule_table(result.rules)
    return lines


def labelled_sets(root: Path) -> list[Path]:
    return sorted(
        p for p in root.iterdir() if (p / "events.jsonl").exists() and (p / "labels.json").exists()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="folder of labelled sets")
    parser.add_argument("--set", action="append", help="only these sets (folder names)")
    parser.add_argument("--max-trace-steps", type=int, default=None)
    args = parser.parse_args()
    require(args.data, "pass --data tests/data for the 40-run subset")
    logging.getLogger("tracejudge.streams.worker").setLevel(logging.WARNING)
    overrides: dict[str, Any] = {"llm_judge_enabled": False, "redis_url": ""}
    if args.max_trace_steps is not None:
        overrides["max_trace_steps"] = args.max_trace_steps
    settings = Settings(**overrides)
    print(f"settings: max_trace_steps {settings.max_trace_steps}, rules only")
    results = []
    for folder in labelled_sets(args.data):
        if args.set and folder.name not in args.set:
            continue
        results.append(run_set(folder, settings))
        print("\n".join(render(results[-1])), flush=True)
    print("all bars met" if all(r.meets for r in results) else "some bars missed")


if __name__ == "__main__":
    main()
