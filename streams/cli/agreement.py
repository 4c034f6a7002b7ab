"""`tracejudge agreement EVENTS --labels FILE`: how right the verdicts are for a user's own
labelled runs, offline, under any settings (rules only, or their judge endpoint on).
`tracejudge agreement --evaluations FILE --labels FILE`: the same for the verdicts the worker
published, so exactly the live worker's figures."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from tracejudge.judges.agreement.rule_rates import NAME_WIDTH_MAX, rule_table
from tracejudge.judges.agreement.tally import Figures
from tracejudge.settings import Settings
from tracejudge.streams.cli import exits
from tracejudge.streams.replay.agreement import (
    Joined,
    ModeRate,
    Published,
    blocks,
    counts,
    document,
    join,
    join_published,
    mode_rates,
    rates,
    read_published,
    share,
    views,
)
from tracejudge.streams.replay.engine import lines_of, replay
from tracejudge.streams.replay.labels import Labels, LabelsError, outcomes_in, read_labels
from tracejudge.streams.shared.visible import visible_lines

VIEW_NAMES = {
    "rules": "rules",
    "final": "published",
    "rules_judged": "  rules",
    "judge": "  judge",
    "blend": "  blend",
}


def run_agreement(settings: Settings, args: argparse.Namespace) -> int:
    # the worker logs a line per evaluation; this command prints its report instead
    for name in ("tracejudge.streams.worker", "tracejudge.streams.shared.outputs"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if (args.events is None) == (args.evaluations is None):
        print(
            "tracejudge: give the verdicts one way, "
            + ("not both" if args.events else "none given")
            + ": EVENTS (recorded events, re-evaluated here under the settings) or "
            "--evaluations FILE (the evaluations the worker published)",
            file=sys.stderr,
        )
        return exits.USAGE_OR_CONFIGURATION
    path = Path(args.events or args.evaluations)
    published = None
    try:
        labels = read_labels(Path(args.labels))
        if args.evaluations is not None:
            with path.open("rb") as lines:  # line by line: a topic read from its beginning
                published = read_published(lines, str(path))
        else:
            raw = path.read_bytes()
    except OSError as exc:
        print(f"tracejudge: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return exits.USAGE_OR_CONFIGURATION
    except LabelsError as exc:
        print(f"tracejudge: bad labels: {exc}", file=sys.stderr)
        return exits.USAGE_OR_CONFIGURATION
    if published is not None:
        return _published(published, labels, args.json)
    records = lines_of(raw)
    if not records:
        print(f"tracejudge: {path} holds no events", file=sys.stderr)
        return exits.USAGE_OR_CONFIGURATION
    # outcome events of the recording first, the labels file after: a label replaces an
    # outcome of the same request and source, as a later outcome does on the worker
    given = outcomes_in(records)
    given.extend(labels)
    print(f"replaying {len(records)} events from {path}", file=sys.stderr)
    result = asyncio.run(replay(settings, records))
    joined = asyncio.run(join(result, given))
    if args.json:
        print(json.dumps(document(joined, settings.llm_judge_enabled is True), indent=2))
    else:
        print(visible_lines(report(joined, settings)))
    return exits.OK


def _published(published: Published, labels: Labels, as_json: bool) -> int:
    """The labels joined to the verdicts as the worker published them: no re-evaluation, so
    the figures are the live worker's whatever the order its runs closed in."""
    if not published.finals and not published.pending:
        print(
            f"tracejudge: {published.name} holds no evaluation (one JSON evaluation a line, as "
            "`tracejudge tail evaluations --json --from-beginning` prints them)"
            + (f"; e.g. {published.examples[0]}" if published.examples else ""),
            file=sys.stderr,
        )
        return exits.USAGE_OR_CONFIGURATION
    joined = asyncio.run(join_published(published, labels))
    if as_json:
        judge_on = any(s != "disabled" for s in published.judge_statuses)
        print(json.dumps(document(joined, judge_on), indent=2))
    else:
        print(visible_lines(report(joined, None)))
    return exits.OK


def report(joined: Joined, settings: Settings | None) -> list[str]:
    """`settings`: those of the replay; None when the verdicts were read as published."""
    by_source = counts(joined)["outcomes_by_source"]
    sources = ", ".join(f"{s} {n}" for s, n in by_source.items())
    labelled = f"{joined.labelled} labelled requests (outcomes: {sources or 'none'})"
    if settings is None:
        lines = _read(joined, labelled)
    else:
        judge = f"LLM judge {settings.llm_model}" if settings.llm_judge_enabled else "rules only"
        lines = [
            f"{joined.verdicts} final verdicts ({judge}, warn threshold {settings.warn_threshold}"
            + (f", {joined.judged} judged" if settings.llm_judge_enabled else "")
            + f"), {labelled}",
        ]
    lines += [
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
        lines += mode_table(mode_rates(joined, block))
    return lines


def mode_table(modes: list[ModeRate], top: int = 10) -> list[str]:
    """The largest failure modes of the labelled runs, and how many of each truly failed."""
    if not modes:
        return []
    # as wide as the longest name shown, within reason, as the rules' table is
    w = min(NAME_WIDTH_MAX * 2, max(28, *(len(m.name) for m in modes[:top])))
    lines = [f"  {'failure mode (docs/modes.md)':<{w}}  truly failed"]
    for m in modes[:top]:
        name = m.name if len(m.name) <= w else m.name[: w - 1] + "…"
        lines.append(f"  {name:<{w}}  {m.failed:>4}/{m.runs:<4} {m.failed / m.runs:>4.0%}")
    if len(modes) > top:
        rest = modes[top:]
        lines.append(
            f"  … {len(rest)} more modes, {sum(m.runs for m in rest)} runs "
            f"({sum(m.failed for m in rest)} truly failed)"
        )
    return lines


def _read(joined: Joined, labelled: str) -> list[str]:
    """What was read from an evaluations file, and what of it is not exact."""
    p = joined.published
    assert p is not None
    thresholds = sorted({kept.threshold for kept in p.finals.values()})
    threshold = (
        f"warn threshold {thresholds[0]}"
        if len(thresholds) == 1
        else f"warn thresholds {thresholds[0]}-{thresholds[-1]}"
        if thresholds
        else "no threshold"
    )
    lines = [
        f"{joined.verdicts} final verdicts as published, read from {p.name} ({joined.judged} "
        f"judged by the LLM judge, {threshold}), {labelled}",
        f"evaluations read {p.read}: pending skipped {p.pending}"
        + (f" ({p.pending_only} requests without a final one)" if p.pending_only else "")
        + f", not understood {p.not_understood}",
        *(f"  e.g. {e}" for e in p.examples),
    ]
    if joined.approximated:
        lines.append(
            f"the rules' own view of {joined.approximated} judged requests is approximated "
            "from their published rule_score, success and incomplete (no pending evaluation "
            "of theirs before the final one): the rules rows may differ a little from the "
            "live worker's; published, judge and blend are exact"
        )
    return lines


def _views(found: dict[str, Figures]) -> list[str]:
    # a team's dimension is a view named `dimension:<name>`: the column is as wide as it
    w = max([10, *(len(VIEW_NAMES.get(name, name)) for name in found)])
    lines = [
        f"  {'view':<{w}} {'runs':>5} {'ok':>5} {'failed':>6}  {'AUC [95 %]':<19} "
        f"{'ok runs alerted':<22} {'failed runs flagged':<22} alert precision"
    ]
    for name, f in found.items():
        if name == "rules_judged":
            lines.append(f"  on the {f.runs} runs the judge answered:")
        auc = "-"
        if f.auc is not None and f.auc_interval is not None:
            auc = f"{f.auc:.3f} [{f.auc_interval[0]:.2f}-{f.auc_interval[1]:.2f}]"
        lines.append(
            f"  {VIEW_NAMES.get(name, name):<{w}} {f.runs:>5} {f.ok_runs:>5} "
            f"{f.failed_runs:>6}  {auc:<19} "
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
