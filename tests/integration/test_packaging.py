"""The wheel installs only `tracejudge`, and an agent project with its own `models` package
can use the agents' client from it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import redis

from tests.test_client_install import closure
from tracejudge.models.names import REDIS_CONTROL_KEY
from tracejudge.models.outputs import EarlyStopDecision

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]

AGENT_CODE = """
import models.outputs, tracejudge.client.early_stop as client
from tracejudge.client.early_stop import EarlyStopClient
assert models.outputs.MINE, "the agent's own models package"
assert client.__file__.startswith({site!r}), client.__file__
decision = EarlyStopClient({url!r}).check("pkg-1")
print(decision.action, decision.iteration)
"""


def build_wheel(out: Path) -> Path:
    subprocess.run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = out.glob("tracejudge-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once for the module's tests (a build writes under the source tree's
    build/, which two builds at once would share)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_has_only_tracejudge_at_top_level(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"tracejudge", "tracejudge-0.1.0.dist-info"}
    for expected in (
        "tracejudge/models/schemas/event.schema.json",
        "tracejudge/prompts/final_judge.system.md",
        "tracejudge/prompts/generic_patterns.json",
        "tracejudge/streams/worker/app.py",
        "tracejudge/streams/cli/__main__.py",
        "tracejudge/__main__.py",  # python -m tracejudge
        "tracejudge/streams/explorer/templates/request.html",
        "tracejudge/client/tracer.py",
        "tracejudge-0.1.0.dist-info/licenses/LICENSE",
    ):
        assert expected in names
    # every folder of the source tree is a package of the wheel
    for folder in ("models", "tables", "judges", "settings", "streams", "prompts", "client"):
        for init in (ROOT / folder).rglob("__init__.py"):
            inside = init.relative_to(ROOT).as_posix()
            assert f"tracejudge/{inside}" in names, f"{inside} missing from the wheel"


def test_an_agent_with_its_own_models_package_uses_the_client(
    tmp_path: Path, redis_url: str, wheel: Path
) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [*PIP, "install", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    project = tmp_path / "agent"
    (project / "models").mkdir(parents=True)
    (project / "models" / "__init__.py").write_text("")
    (project / "models" / "outputs.py").write_text("MINE = True\n")
    decision = EarlyStopDecision(
        decision_id="d1",
        request_id="pkg-1",
        iteration=3,
        action="stop",
        reason="conclusion",
        evidence="done",
        ts=time.time(),
    )
    redis.Redis.from_url(redis_url).set(
        REDIS_CONTROL_KEY.format(request_id="pkg-1"), decision.model_dump_json(), ex=60
    )
    result = subprocess.run(
        [sys.executable, "-c", AGENT_CODE.format(site=str(site), url=redis_url)],
        cwd=project,
        env={**os.environ, "PYTHONPATH": f"{project}{os.pathsep}{site}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["stop", "3"]
    as_module = subprocess.run(
        [sys.executable, "-m", "tracejudge", "--version"],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert as_module.stdout.strip() == "tracejudge 0.1.0", as_module.stderr


def client_only_venv(root: Path, wheel: Path) -> Path:
    """A fresh venv holding the wheel and only what `pip install tracejudge` (no extras) pulls
    in: the very distributions of this environment, linked in, so that the test needs no index
    and sees none of the worker extra (no faust, no opencc, no pydantic-settings)."""
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    subprocess.run(
        [*PIP, "--python", str(python), "install", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    deps = root / "deps"
    deps.mkdir()
    for name in closure("tracejudge") - {"tracejudge"}:
        dist = metadata.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or []} - {".."}:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (deps / top).exists():
                (deps / top).symlink_to(source)
    (site,) = (root / "venv" / "lib").glob("python3*/site-packages")
    (site / "client_deps.pth").write_text(f"{deps}\n")
    return python


def test_the_client_only_install_has_a_working_command(tmp_path: Path, wheel: Path) -> None:
    python = client_only_venv(tmp_path, wheel)
    command = str(python.parent / "tracejudge")
    missing = subprocess.run(
        [str(python), "-c", "import faust"], capture_output=True, timeout=60, check=False
    )
    assert missing.returncode != 0, "the client-only venv must not see the worker extra"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path
        )

    for args in ([command, "--version"], [str(python), "-m", "tracejudge", "--version"]):
        done = run(*args)
        assert (done.returncode, done.stdout.strip()) == (0, "tracejudge 0.1.0"), done.stderr
    for args in ([command, "--help"], [command, "publish", "--help"]):
        done = run(*args)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "usage: tracejudge" in done.stdout
    bare = run(command)  # no command: the usage with every command, a usage error
    assert bare.returncode == 2 and "worker" in bare.stderr and "publish" in bare.stderr
    # a command that needs the worker extra: one line saying what to install
    needs = run(command, "worker")
    assert needs.returncode == 2 and "Traceback" not in needs.stderr, needs.stderr
    assert needs.stderr.strip().count("\n") == 0
    assert "tracejudge[worker]" in needs.stderr
