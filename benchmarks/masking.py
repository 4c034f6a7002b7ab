"""What masking changes in real agent traffic, and what it costs.

    python -m benchmarks.masking [--all]

Masks every goal, tool-call argument, tool result preview and final answer of the team's two
sets (`../shared/data/swe_java`, `../shared/data/tau_airline`) and reports, per set and field,
how many texts changed and which detector changed them, then prints each change (the original
fragment with a little context and what replaced it) so a person can tell a real secret from a
false positive; `--all` prints every change instead of the first 40 per set. The coding set's
patches and goals are code and issue text: a change there is either a real secret or a false
positive on code. Also times `mask` over all those texts (the worker masks every output on its
own path): best of three passes.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.data import SHARED_DATA, require
from tracejudge.judges.masking.detectors import _PLUGINS, PATTERNS, Span
from tracejudge.judges.masking.redact import mask, spans

SETS = ("swe_java", "tau_airline")
# event type -> the free-text fields measured (the ones an agent fills with its own content)
FIELDS = {
    "task_started": ("goal",),
    "tool_call": ("args_summary", "result_preview"),
    "final_response": ("output",),
}
CONTEXT = 30  # characters shown either side of a change


def texts(path: Path) -> Iterator[tuple[str, str, str]]:
    """(field, request_id, text) for every non-empty measured field of the set."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            for name in FIELDS.get(event["type"], ()):
                value = event.get(name)
                if isinstance(value, str) and value:
                    yield name, event["request_id"], value


def detectors(text: str) -> list[tuple[int, int, str]]:
    """Every detector's own spans (before merging), named so a change can be traced to its
    pattern: `kind/N` for the Nth pattern of that kind in `detectors.py`, the plugin's class
    name for detect-secrets."""
    found: list[tuple[int, int, str]] = []
    seen: Counter[str] = Counter()
    for pattern in PATTERNS:
        seen[pattern.kind] += 1
        found += [(s, e, f"{k}/{seen[k]}") for s, e, k in pattern.spans(text)]
    for plugin, _kind in _PLUGINS:
        for regex in plugin.denylist:
            found += [(m.start(), m.end(), type(plugin).__name__) for m in regex.finditer(text)]
    return found


@dataclass
class Field:
    texts: int = 0
    changed: int = 0
    by_detector: Counter[str] = field(default_factory=Counter)


@dataclass
class Change:
    set_name: str
    field_name: str
    request_id: str
    detector: str
    before: str
    after: str


def describe(span: Span, text: str, names: list[tuple[int, int, str]]) -> tuple[str, str, str]:
    start, end, kind = span
    who = sorted({n for s, e, n in names if s < end and e > start}) or [kind]
    left = text[max(0, start - CONTEXT) : start]
    right = text[end : end + CONTEXT]
    return "+".join(who), f"{left}«{text[start:end]}»{right}", f"[REDACTED:{kind}]"


def measure(set_name: str, path: Path) -> tuple[dict[str, Field], list[Change], list[str]]:
    fields: dict[str, Field] = defaultdict(Field)
    changes: list[Change] = []
    all_texts: list[str] = []
    for name, request_id, text in texts(path):
        all_texts.append(text)
        tally = fields[name]
        tally.texts += 1
        if mask(text) == text:
            continue
        tally.changed += 1
        names = detectors(text)
        whose = set()
        for span in spans(text):
            who, before, after = describe(span, text, names)
            whose.add(who)
            changes.append(Change(set_name, name, request_id, who, before, after))
        tally.by_detector.update(whose)
    return dict(fields), changes, all_texts


def timing(all_texts: list[str], passes: int = 3) -> float:
    """Best of `passes` seconds to mask every text once."""
    best = float("inf")
    for _ in range(passes):
        started = time.perf_counter()
        for text in all_texts:
            mask(text)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="print every change")
    args = parser.parse_args()
    limit = None if args.all else 40
    for set_name in SETS:
        path = require(
            SHARED_DATA / set_name / "events.jsonl",
            "this benchmark measures real traffic and has no substitute in the repository; "
            "`python -m benchmarks.redaction` measures the labelled corpus instead.",
        )
        fields, changes, all_texts = measure(set_name, path)
        seconds = timing(all_texts)
        chars = sum(map(len, all_texts))
        print(f"== {set_name}: {len(all_texts)} texts, {chars / 1e6:.2f} M chars")
        print(f"{'field':<16} {'texts':>6} {'changed':>8}  by detector")
        for name, tally in sorted(fields.items()):
            who = ", ".join(f"{k} {n}" for k, n in tally.by_detector.most_common())
            print(f"{name:<16} {tally.texts:>6} {tally.changed:>8}  {who}")
        print(
            f"mask over all: {seconds * 1e3:.0f} ms (best of 3), "
            f"{seconds / len(all_texts) * 1e6:.1f} µs per text, "
            f"{chars / seconds / 1e6:.2f} M chars/s"
        )
        shown = changes if limit is None else changes[:limit]
        for change in shown:
            print(
                f"  [{change.field_name} {change.detector}] {change.request_id}\n"
                f"      {change.before!r}\n      -> {change.after}"
            )
        if len(shown) < len(changes):
            print(f"  ... {len(changes) - len(shown)} more (--all prints them)")
        print()


if __name__ == "__main__":
    main()
