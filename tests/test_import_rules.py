"""The import contracts in pyproject.toml hold, and a forbidden import breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("models", "tables", "judges", "settings", "streams", "prompts", "client")


def tracejudge_tree(base: Path, copy: bool) -> Path:
    """The folders under their installed name, as links or as copies to edit."""
    package = base / "tracejudge"
    package.mkdir()
    for folder in FOLDERS:
        if copy:
            shutil.copytree(ROOT / folder, package / folder, ignore=shutil.ignore_patterns("*.pyc"))
        else:
            (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return base


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "lint-imports"),
            "--config",
            str(ROOT / "pyproject.toml"),
        ],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_hold(tmp_path: Path) -> None:
    result = lint_imports(tracejudge_tree(tmp_path, copy=False))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_model_that_imports_faust_breaks_the_build(tmp_path: Path) -> None:
    tree = tracejudge_tree(tmp_path, copy=True)
    ids = tree / "tracejudge" / "models" / "ids.py"
    ids.write_text(ids.read_text() + "\nimport faust  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode == 1
    assert "models imports nothing of ours and no Kafka, Faust, Redis or httpx BROKEN" in (
        result.stdout
    )
    assert "tracejudge.models.ids -> faust" in result.stdout


def test_a_judge_that_imports_the_worker_breaks_the_build(tmp_path: Path) -> None:
    tree = tracejudge_tree(tmp_path, copy=True)
    rules = tree / "tracejudge" / "judges" / "rules" / "judge.py"
    rules.write_text(rules.read_text() + "\nfrom tracejudge.streams.worker import app  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode == 1
    assert "judges import only models, tables and prompts of ours" in result.stdout
    assert "BROKEN" in result.stdout


def test_a_judges_folder_that_imports_one_above_it_breaks_the_build(tmp_path: Path) -> None:
    # masking is the bottom layer: every other folder of the judges may use it, it uses none
    tree = tracejudge_tree(tmp_path, copy=True)
    redact = tree / "tracejudge" / "judges" / "masking" / "redact.py"
    redact.write_text(redact.read_text() + "\nfrom tracejudge.judges.rules import judge  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode == 1
    assert "the judges' folders are layered: each imports only the folders below it BROKEN" in (
        result.stdout
    )
    assert "tracejudge.judges.masking.redact -> tracejudge.judges.rules.judge" in result.stdout


def test_the_judges_hold_only_their_role_folders() -> None:
    # each role in a folder whose __init__.py says what it holds and what it may import
    judges = ROOT / "judges"
    loose = sorted(p.name for p in judges.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules beside the role folders: {loose}"
    for folder in (p for p in judges.iterdir() if p.is_dir() and p.name != "__pycache__"):
        doc = (folder / "__init__.py").read_text()
        assert doc.startswith('"""') and "import" in doc, f"{folder.name}: no docstring on imports"


def test_a_client_that_imports_streams_breaks_the_build(tmp_path: Path) -> None:
    tree = tracejudge_tree(tmp_path, copy=True)
    tracer = tree / "tracejudge" / "client" / "tracer.py"
    tracer.write_text(tracer.read_text() + "\nimport tracejudge.settings  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode == 1
    assert "tracejudge.client.tracer -> tracejudge.settings" in result.stdout


def test_importing_the_client_loads_neither_faust_nor_streams() -> None:
    # nor anything of the worker's: what `pip install tracejudge` (no extras) does not bring
    code = (
        "import sys, tracejudge.client\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('faust', 'mode', 'aiokafka',"
        " 'redis', 'rocksdict', 'grpc', 'opencc')"
        " or m.startswith(('tracejudge.streams', 'tracejudge.judges'))]\n"
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
