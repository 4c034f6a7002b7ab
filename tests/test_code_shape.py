"""The code's shape, kept: short functions in streams/, small modules."""

from __future__ import annotations

import ast
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_function_under_streams_is_longer_than_80_lines() -> None:
    long = []
    for path in (ROOT / "streams").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.name} ({lines} lines)")
    assert not long


def test_the_median_module_is_at_most_150_lines() -> None:
    for folder in ("models", "judges", "streams"):
        sizes = [len(p.read_text().splitlines()) for p in (ROOT / folder).rglob("*.py")]
        assert statistics.median(sizes) <= 150, folder
