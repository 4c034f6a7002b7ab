"""The code's shape, kept: short functions in streams/, small modules."""

from __future__ import annotations

import ast
import re
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_function_under_streams_is_longer_than_80_lines() -> None:
    long = []
    for path in [*(ROOT / "streams").rglob("*.py"), *(ROOT / "settings").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.name} ({lines} lines)")
    assert not long


def test_the_median_module_is_at_most_150_lines() -> None:
    for folder in ("models", "tables", "judges", "settings", "streams"):
        sizes = [len(p.read_text().splitlines()) for p in (ROOT / folder).rglob("*.py")]
        assert statistics.median(sizes) <= 150, folder


# "issue" or "done-when" and a number: a tracker's numbers, which a reader of the repository
# cannot open. Other projects' trackers named with the project ("faust-streaming #606") are fine.
TRACKER = re.compile(r"\bissues? #?\d{1,4}\b|\bdone[- ]when \d|\bissue[-_]?\d{1,4}\b", re.I)
FOLDERS = ["models", "tables", "judges", "settings", "streams", "prompts", "client", "entry"]
FOLDERS += ["tests", "docs", "benchmarks", "scripts", "deploy", "examples", ".ci"]
TOP = ("README.md", "BENCHMARKS.md", "pyproject.toml", "Makefile", "docker-compose.yml")


def test_no_tracker_number_in_code_tests_or_docs() -> None:
    # CHANGELOG.md is the history; everything else says what and why
    files = [ROOT / name for name in TOP]
    for folder in FOLDERS:
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file()]
    cited = []
    for path in files:
        if "__pycache__" in path.parts or path.suffix in {".png", ".gguf", ".pyc"}:
            continue
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if TRACKER.search(line):
                cited.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not cited, "\n".join(cited)
