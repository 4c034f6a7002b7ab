"""The wheel installs only `tracejudge`, and an agent project with its own `models` package
can use the agents' client from it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import redis

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


def test_the_wheel_has_only_tracejudge_at_top_level(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"tracejudge", "tracejudge-0.1.0.dist-info"}
    for expected in (
        "tracejudge/models/schemas/event.schema.json",
        "tracejudge/prompts/final_judge.system.md",
        "tracejudge/prompts/generic_patterns.json",
        "tracejudge/streams/worker/app.py",
        "tracejudge/streams/cli/__main__.py",
        "tracejudge/__main__.py",  # python -m tracejudge
        "tracejudge/streams/ui/templates/request.html",
        "tracejudge/client/tracer.py",
        "tracejudge-0.1.0.dist-info/licenses/LICENSE",
    ):
        assert expected in names
    # every folder of the source tree is a package of the wheel
    for folder in ("models", "judges", "streams", "prompts", "client"):
        for init in (ROOT / folder).rglob("__init__.py"):
            inside = init.relative_to(ROOT).as_posix()
            assert f"tracejudge/{inside}" in names, f"{inside} missing from the wheel"


def test_an_agent_with_its_own_models_package_uses_the_client(
    tmp_path: Path, redis_url: str
) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [*PIP, "install", "--no-deps", "--target", str(site), str(build_wheel(tmp_path / "wheel"))],
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
