"""What `pip install tracejudge` (no extras) puts in an agent's environment: the distributions
the package's own requirements pull in, and their size on disk, read from the installed
metadata. benchmarks/client.py does the same in a fresh venv from the index."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

MAX_PACKAGES = 12
MAX_MB = 30.0


def closure(name: str, extras: frozenset[str] = frozenset()) -> set[str]:
    """`name` and every distribution its requirements (with `extras`) pull in, here."""
    seen: set[str] = set()
    todo = [(name, extras)]
    while todo:
        dist_name, wanted = todo.pop()
        dist = metadata.distribution(dist_name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        for line in dist.requires or []:
            req = Requirement(line)
            envs = [{"extra": e} for e in wanted] or [{"extra": ""}]
            applies = req.marker is None or any(req.marker.evaluate(env) for env in envs)
            if applies and req.name.lower() != key:  # not an extra naming the package itself
                todo.append((req.name, frozenset(req.extras)))
    return seen


def megabytes(names: set[str]) -> float:
    total = 0
    for name in names:
        for file in metadata.distribution(name).files or []:
            path = Path(file.locate())
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def test_the_client_install_is_small_and_has_nothing_of_the_worker() -> None:
    names = closure("tracejudge")
    # the editable install's own files are the repository: count ours as the wheel's ~1 MB
    size = megabytes(names - {"tracejudge"}) + 1.0
    print(f"client install: {len(names)} packages, {size:.1f} MB: {sorted(names)}")
    assert len(names) <= MAX_PACKAGES and size <= MAX_MB
    assert not names & {"faust-streaming", "aiokafka", "redis", "rocksdict", "grpcio", "opencc"}


def test_the_worker_extra_brings_the_worker() -> None:
    names = closure("tracejudge", frozenset({"worker"}))
    assert {"faust-streaming", "aiokafka", "redis", "rocksdict"} <= names


def test_the_command_without_the_worker_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['faust'] = None\n"  # as if the worker extra were not installed
        "sys.argv = ['tracejudge', 'worker']\n"
        "from tracejudge.streams.cli.entry import main\n"
        "sys.exit(main())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "tracejudge[worker]" in done.stderr and "faust" in done.stderr
