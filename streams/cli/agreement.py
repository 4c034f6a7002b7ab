"""`tracejudge agreement EVENTS --labels FILE`: how right the verdicts are for a user's own
labelled runs, offline, under any settings (rules only, or their judge endpoint on)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from tracejudge.judges.agreement import Figures
from tracejudge.judges.rule_rates import rule_table
from tracejudge.streams.cli import exits
from tracejudge.streams.replay.agreement import (
    Joined,
    blocks,
    counts,
    document,
    join,
    rates,
    share,
    views,
)
from tracejudge.streams.replay.engine import lines_of, replay
from tracejudge.streams.replay.labels import LabelsError, outcomes_in, read_labels
from tracejudge.streams.settings import Settings

VIEW_NAMES = {
    "rules": "rules",
    "final": "published",
    "rules_judged": "  rules",
    "judge": "  judge",
    "blend": "  blend",
}


def run_agreement(settings: Settings, args: argparse.Namespace) -> int:
    # the worker logs a line per evaluation; this command prints its report instead
    for name in ("tracejudge.streams.worker", "tracejudge.streams.outputs"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        raw = Path(args.events).read_bytes()
        labels = read_labels(Path(args.labels))
    except OSError as exc:
        print(f"tracejudge: cannot read {args.events}: {exc.strerror}", file=sys.stderr)
        return exits.USAGE_OR_CONFIGURATION
    except LabelsError as exc:
        print(f"tracejudge: bad labels: {exc}", file=sys.stderr)
        return exits.USAGE_OR_CONFIGURATION
    records = lines_of(raw)
    if not records:
        print(f"tracejudge: {args.events} holds no events", file=sys.stderr)
        return exits.USAGE_OR_CONFIGURATION
    # outcome events of the recording first, the labels file after: a label replaces an
    # outcome of the same request and source, as a later outcome does on the worker
    given = outcomes_in(records)
    given.extend(labels)
    print(f"replaying {len(records)} events from {args.events}", file=sys.stderr)
    result = asyncio.run(replay(settings, records))
    joined = asyncio.run(join(result, given))
    if args.json:
        print(json.dumps(document(joined, settings.llm_judge_enabled is True), indent=2))
    else:
        print("\n".join(report(joined, settings)))
    return exits.OK


def report(joined: Joined, settings: Settings) -> list[str]:
    judge = f"LLM judge {settings.llm_model}" if settings.llm_judge_enabled else "rules only"
    by_source = counts(joined)["outcomes_by_source"]
    sources = ", ".join(f"{s} {n}" for s, n in by_source.items())
    lines = [
        f"{joined.verdicts} final verdicts ({judge}, warn threshold {settings.warn_threshold}"
        + (f", {joined.judged} judged" if settings.llm_judge_enabled else "")
        + f"), {joined.labelled} labelled requests (outcomes: {sources or 'none'})",
        f"labelled, no verdict {len(joined.no_verdict)}   verdict, no label "
        f"{len(joined.no_label)}   labels not understood {joined.labels.not_understood}",
        *(f"  e.g. {e}" for e in joined.labels.examples),
    ]
    if joined.no_verdict:
        lines.append(f"  labelled, no verdict, e.g. {', '.join(joined.no_verdict[:3])}")
    if not joined.tally.counts:
        lines.append("no labelled request has a final verdict: no figures")
    for block in blocks(joined.tally):
        found = views(joined.tally, block)
        lines += ["", f"== {block.title()}", *_views(found)]
        lines += _calibration(found.get("final", found["rules"]))
        lines += rule_table(rates(joined, block))
    return lines


def _views(found: dict[str, Figures]) -> list[str]:
    lines = [
        f"  {'view':<10} {'runs':>5} {'ok':>5} {'failed':>6}  {'AUC [95 %]':<19} "
        f"{'ok runs alerted':<22} {'failed runs flagged':<22} alert precision"
    ]
    for name, f in found.items():
        if name == "rules_judged":
            lines.append(f"  on the {f.runs} runs the judge answered:")
        auc = "-"
        if f.auc is not None and f.auc_interval is not None:
            auc = f"{f.auc:.3f} [{f.auc_interval[0]:.2f}-{f.auc_interval[1]:.2f}]"
        lines.append(
            f"  {VIEW_NAMES[name]:<10} {f.runs:>5} {f.ok_runs:>5} {f.failed_runs:>6}  {auc:<19} "
            f"{share(f.ok_alerted):<22} {share(f.failed_flagged):<22} "
            f"{share(f.alert_precision)}"
        )
    return lines


def _calibration(f: Figures) -> list[str]:
    lines = [f"  {'score':<8} {'runs':>5}  ok share [95 %]   (calibration of the published score)"]
    for b in f.calibration:
        if b.runs:
            lines.append(f"  {f'{b.low}-{b.high}':<8} {b.runs:>5}  {share(b.ok_share)}")
    return lines
