"""The tests run on a clone alone: they read data kept in the repository, never the team's
shared data folder beside it, which a user's clone does not have."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from tests.conftest import TAU_DATA

TESTS = Path(__file__).resolve().parent
# a path into the shared folder, however it is spelt: "../shared", "shared/data",
# Path(...) / "shared" / "data", Path("..", "shared", ...)
SHARED_PATH = re.compile(
    r"""\.\./shared\b|\bshared/data\b|/\s*["']shared["']|["']shared["']\s*[,/]"""
)


def test_no_test_reads_the_shared_data_folder() -> None:
    found = []
    for path in sorted(TESTS.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path == Path(__file__):
            continue  # this file spells the paths out to test the pattern
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # binary data: no path in it
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if SHARED_PATH.search(line):
                found.append(f"{path.relative_to(TESTS.parent)}:{number}: {line.strip()}")
    assert not found, "tests must read tests/data, not the shared data folder:\n" + "\n".join(found)


def test_the_pattern_finds_each_spelling() -> None:
    spellings = [
        'Path(__file__).parent.parent / "shared" / "data"',
        'Path("..", "shared", "data")',
        "../shared/data/tau_airline/events.jsonl",
        "read it from shared/data/tau_airline",
    ]
    assert all(SHARED_PATH.search(s) for s in spellings)
    assert not SHARED_PATH.search("one broker shared by the tests, data kept in tests/data")


def test_the_vendored_tau_subset_is_whole_labelled_runs_balanced_by_reward() -> None:
    labels = json.loads((TAU_DATA / "labels.json").read_text())
    events = [json.loads(line) for line in (TAU_DATA / "events.jsonl").read_text().splitlines()]
    runs = Counter(e["request_id"] for e in events)
    assert set(runs) == set(labels)
    starts = Counter(e["request_id"] for e in events if e["type"] == "task_started")
    finals = Counter(e["request_id"] for e in events if e["type"] == "final_response")
    assert starts == finals == Counter(set(labels))  # each run whole: one start, one answer
    rewards = Counter(label["reward"] for label in labels.values())
    assert rewards[1.0] == rewards[0.0] > 0
    size = sum(p.stat().st_size for p in TAU_DATA.iterdir())
    assert size < 1_000_000, f"{size} bytes: the vendored data is meant to stay small"
