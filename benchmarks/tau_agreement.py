"""How the rule verdicts agree with tau-bench's ground truth (no broker needed).

    python -m benchmarks.tau_agreement [--data DIR]

Builds each run's window the way the worker does (steps after final_response are late and not
part of the window), judges it with the rule judge, and compares with labels.json.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.conftest import SHARED_DATA
from tracejudge.judges.agreement import auc
from tracejudge.judges.rules import RuleJudge
from tracejudge.judges.verdicts import Policy
from tracejudge.models.events import STEP_TYPES, parse_event
from tracejudge.models.window import assemble_window


def windows(path: Path) -> dict[str, Any]:
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
        dropped = max(0, steps - 50)
        result[rid] = assemble_window(
            rid, parsed, closed_by="final_response", step_count=steps, steps_dropped=dropped
        )
    return result


def report(name: str, predicted: dict[str, bool], actual: dict[str, bool]) -> None:
    tp = sum(1 for r in actual if predicted[r] and actual[r])
    fp = sum(1 for r in actual if predicted[r] and not actual[r])
    fn = sum(1 for r in actual if not predicted[r] and actual[r])
    tn = len(actual) - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    print(
        f"{name:<48} tp={tp:<3} fp={fp:<3} fn={fn:<3} tn={tn:<3} "
        f"precision={precision:.2f} recall={recall:.2f} accuracy={(tp + tn) / len(actual):.2f}"
    )


def main(data: Path) -> None:
    labels = json.loads((data / "labels.json").read_text())
    judge = RuleJudge()
    threshold = Policy().warn_threshold
    verdicts = {rid: judge.judge(w) for rid, w in windows(data / "events.jsonl").items()}
    ok = {rid: lab["reward"] >= 1.0 for rid, lab in labels.items()}
    failed_run = {rid: not good for rid, good in ok.items()}
    missing = {rid: bool(lab["missing_expected_write_actions"]) for rid, lab in labels.items()}
    flagged = {
        r: v.incomplete or not v.success or v.rule_score < threshold for r, v in verdicts.items()
    }
    n_failed, n_ok = sum(failed_run.values()), sum(ok.values())
    print(f"{len(verdicts)} runs; {n_failed} failed (reward 0), {n_ok} ok")
    print(f"AUC (rule_score vs ok): {auc({r: v.rule_score for r, v in verdicts.items()}, ok):.3f}")
    print(
        f"failed runs flagged (not passed, not success or incomplete): "
        f"{sum(flagged[r] for r in failed_run if failed_run[r])}/{n_failed} "
        f"({sum(flagged[r] for r in failed_run if failed_run[r]) / n_failed:.0%}); "
        f"ok runs flagged: {sum(flagged[r] for r in ok if ok[r])}/{n_ok} "
        f"({sum(flagged[r] for r in ok if ok[r]) / n_ok:.0%})"
    )
    report(
        "incomplete vs missing expected write action",
        {r: v.incomplete for r, v in verdicts.items()},
        missing,
    )
    report("incomplete vs reward 0", {r: v.incomplete for r, v in verdicts.items()}, failed_run)
    report("not success vs reward 0", {r: not v.success for r, v in verdicts.items()}, failed_run)
    report(
        f"score < {threshold} vs reward 0",
        {r: v.rule_score < threshold for r, v in verdicts.items()},
        failed_run,
    )
    fired: dict[str, list[str]] = defaultdict(list)
    for rid, verdict in verdicts.items():
        for rule in sorted({rule for rule, _ in verdict.findings}):
            fired[rule].append(rid)
    print("per rule: runs it fired on (failed / ok)")
    for rule, rids in sorted(fired.items()):
        bad = sum(1 for r in rids if failed_run[r])
        short = ", ".join(r.rsplit(":", 2)[-2] + ":" + r.rsplit(":", 1)[-1] for r in rids[:6])
        print(f"  {rule:<28} {bad:>3} / {len(rids) - bad:<3} {short}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    main(parser.parse_args().data)
