"""`tracejudge replay`: load settings A (and B), read the recording, run, print, write."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
from pathlib import Path

from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.streams.cli import exits
from tracejudge.streams.cli.configured import loaded
from tracejudge.streams.replay.engine import ReplayResult, lines_of, replay
from tracejudge.streams.replay.report import agreement, comparison, describe, summary
from tracejudge.streams.shared.visible import visible_lines

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> float:
    """ "90s", "30m", "2h", "1d" (a bare number is seconds)."""
    found = _DURATION.match(text)
    if not found:
        raise ValueError(f"not a duration: {text!r} (use 30m, 2h, 1d)")
    return float(found.group(1)) * _UNIT_S[found.group(2)]


def run_replay(settings: Settings, args: argparse.Namespace) -> int:
    # the worker logs a line per evaluation; a replay prints its report instead
    logging.getLogger("tracejudge.streams.worker").setLevel(logging.WARNING)
    a = (
        loaded(args.replay_config, f"settings A ({args.replay_config})")
        if args.replay_config
        else settings
    )
    b = loaded(args.against, f"settings B ({args.against})") if args.against else None
    if a is None or (args.against and b is None):
        return exits.USAGE_OR_CONFIGURATION
    if args.from_topic:
        from tracejudge.streams.kafka.io import read_since

        records = asyncio.run(read_since(a, a.topic(names.EVENTS), duration_s(args.since)))
        source = f"{a.topic(names.EVENTS)}, last {args.since}"
    elif args.file:
        try:
            records = lines_of(Path(args.file).read_bytes())
        except OSError as exc:
            print(f"tracejudge: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
            return 1
        source = args.file
    else:
        print("tracejudge: replay needs a FILE or --from-topic", file=sys.stderr)
        return 2
    labels = json.loads(Path(args.labels).read_text()) if args.labels else None
    print(f"replaying {len(records)} events from {source}", file=sys.stderr)
    runs = [("A", _run(a, records))]
    if b is not None:
        runs.append(("B", _run(b, records)))
    lines: list[str] = []
    for name, result in runs:
        lines += ["", describe(name, result), *summary(result)]
        if labels is not None:
            lines += agreement(result, labels)
    if b is not None:
        lines += ["", "B against A", *comparison(runs[0][1], runs[1][1])]
    report = visible_lines(lines).lstrip("\n")  # request ids and agent names: shown, not obeyed
    print(report)
    if args.out is not None:
        _write(args.out, runs, report)
    return 0


def _run(settings: Settings, records: list[tuple[bytes | None, bytes]]) -> ReplayResult:
    total = len(records)
    tty = sys.stderr.isatty()

    def progress(done: int) -> None:
        if tty and (done % 200 == 0 or done == total):
            bar = "#" * (30 * done // max(total, 1))
            print(f"\r[{bar:<30}] {done}/{total} events", end="", file=sys.stderr, flush=True)

    result = asyncio.run(replay(settings, records, progress))
    if tty:
        print(file=sys.stderr)
    return result


def _write(out: Path, runs: list[tuple[str, ReplayResult]], report: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, result in runs:
        path = out / f"evaluations-{name}.jsonl"
        path.write_text(
            "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in result.evaluations.values())
        )
    (out / "report.txt").write_text(report + "\n")
