"""The `tracejudge` command run as a user runs it: a child process started from the clone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def clean_env(**given: str) -> dict[str, str]:
    """A fresh user's environment: this one without any TRACEJUDGE_ setting, plus `given`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("TRACEJUDGE_")}, **given}


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """`python -m tracejudge ARGS` (`env`: None inherits this one), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "tracejudge", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


def agreement_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """`tracejudge agreement ARGS --json` in this process, its report parsed."""
    from tracejudge.streams.cli.main import main

    code = main(["agreement", *args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    found: dict[str, Any] = json.loads(captured.out)
    return found


def as_json(value: Any) -> Any:
    """`value` as the command prints it (tuples as lists)."""
    return json.loads(json.dumps(value))
