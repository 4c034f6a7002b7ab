"""`tracejudge acls --apply` against a broker that cannot take ACLs. The demo's broker (Tansu) has
no authorizer and answers CreateAcls with what librdkafka cannot parse: librdkafka fails an
assertion and aborts its process. The request runs in a child process, so the command says
what happened in one line and exits 3, instead of dying by SIGABRT."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.realservices import ROOT
from tracejudge.streams.demo.embedded import start_tansu

pytestmark = pytest.mark.integration


def test_apply_against_a_broker_without_acls_is_one_line_not_an_abort(tmp_path: Path) -> None:
    broker, bootstrap = start_tansu(tmp_path)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEJUDGE_")} | {
            "TRACEJUDGE_KAFKA_BOOTSTRAP": bootstrap
        }
        done = subprocess.run(
            [sys.executable, "-m", "tracejudge.streams.cli", "acls", "--apply"],
            capture_output=True, text=True, timeout=180, cwd=ROOT, env=env, check=False,
        )  # fmt: skip
    finally:
        broker.stop()
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "does it support ACLs, with an authorizer configured?" in lines[0]
    assert "Assertion" not in done.stderr and "PROTOERR" not in done.stderr
