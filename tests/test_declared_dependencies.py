"""Every package the code imports is declared in pyproject.toml, in the part of the install that
needs it: the client and the contract in the core dependencies, the rest in the extras."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# the frameworks an integration serves: the agent has them, the client does not pull them in
FRAMEWORKS = {"agents", "langchain_core", "opentelemetry", "openai"}


def declared(*groups: str) -> set[str]:
    lines = list(PROJECT["dependencies"])
    for group in groups:
        lines += PROJECT["optional-dependencies"][group]
    return {Requirement(line).name.lower().replace("_", "-") for line in lines}


def imported(*folders: str, leave_out: str = "") -> set[str]:
    """Top-level modules imported anywhere in these folders (but `leave_out`), standard library
    left out."""
    found: set[str] = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            if leave_out and path.is_relative_to(ROOT / leave_out):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"tracejudge", "__future__"}


def distributions(modules: set[str]) -> dict[str, set[str]]:
    known = metadata.packages_distributions()
    return {m: {d.lower().replace("_", "-") for d in known.get(m, [])} for m in modules}


def test_the_client_and_the_contract_need_only_the_core_dependencies() -> None:
    core = declared()
    for module, dists in distributions(imported("client", "models") - FRAMEWORKS).items():
        if module == "redis":  # imported when a Redis URL is given: the `redis` extra
            assert dists & declared("redis"), module
            continue
        if module == "cryptography":  # imported when an Ed25519 key is given: `signing`
            assert dists & declared("signing"), module
            continue
        assert dists & core, f"{module} ({dists}) is not a core dependency"


def test_everything_the_worker_imports_is_declared() -> None:
    worker = declared("worker")
    code = imported("streams", "judges", "prompts", leave_out="streams/demo")
    for module, dists in distributions(code).items():
        assert dists & worker, f"{module} ({dists}) is not declared in the worker extra"
    demo = declared("worker", "demo")
    for module, dists in distributions(imported("streams/demo")).items():
        assert dists & demo, f"{module} ({dists}) is not declared in the demo extra"


def test_the_integrations_frameworks_are_pinned_in_the_examples_extra() -> None:
    examples = declared("examples")
    for module, dists in distributions(imported("client/integrations") & FRAMEWORKS).items():
        assert dists & examples or module == "openai", module  # openai comes with openai-agents


def test_the_command_knows_every_module_of_the_worker_extra() -> None:
    """streams/cli/entry.py names them to tell a missing extra from a bug: it must not drift."""
    from tracejudge.streams.cli.entry import WORKER_MODULES

    core = declared()
    code = imported("streams", "judges", "prompts", leave_out="streams/demo")
    worker_only = {m for m, dists in distributions(code).items() if not dists & core}
    assert worker_only <= WORKER_MODULES, sorted(worker_only - WORKER_MODULES)
