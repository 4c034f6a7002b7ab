"""`tracejudge --version`: the version written once in pyproject.toml, read from the install."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_the_one_in_pyproject() -> None:
    written = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    done = subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == f"tracejudge {written}"


def test_the_changelog_has_the_version_or_unreleased_changes_above_it() -> None:
    written = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    sections = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    newest = sections[1:2] if sections[:1] == ["Unreleased"] else sections[:1]
    assert newest == [written], f"CHANGELOG.md: {sections[:2]}, pyproject.toml: {written}"
