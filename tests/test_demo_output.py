"""What the demo prints about the services it uses: never a password from their URLs."""

from __future__ import annotations

import os
import shlex
import socket
from pathlib import Path

import pytest

from tracejudge.settings import Settings, load_settings
from tracejudge.streams.cli.main import _epilog
from tracejudge.streams.demo.run import Serving, _redis

PASSWORD = "s3cr3t-redis-pw"


def test_the_configured_redis_is_named_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a loopback listener stands in for the user's Redis: the demo only checks that it answers
    with socket.create_server(("127.0.0.1", 0)) as server:
        url = f"redis://user:{PASSWORD}@127.0.0.1:{server.getsockname()[1]}/0"
        chosen = _redis(Settings(redis_url=url), tmp_path, [])
    assert chosen == url  # the worker still gets the real URL
    said = capsys.readouterr().out
    assert "127.0.0.1" in said and PASSWORD not in said


def test_the_serving_commands_carry_no_redis_password() -> None:
    serving = Serving(
        "127.0.0.1:9092", "demo-", "tracejudge", f"redis://:{PASSWORD}@127.0.0.1:6379/0",
        "http://127.0.0.1:8091", False,
    )  # fmt: skip
    line = serving.env(redis=True)
    assert "TRACEJUDGE_REDIS_URL=redis://" in line and PASSWORD not in line


@pytest.mark.parametrize("redis_url", ["redis://127.0.0.1:46379/0", ""])
def test_the_printed_status_command_reads_the_demos_redis(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `status` reads the live agreement from Redis: run as printed, in a shell with no
    # TRACEJUDGE_ setting, it must get the demo's Redis (or none), never the default URL
    serving = Serving(
        "127.0.0.1:9092", "demo-", "tracejudge", redis_url, "http://127.0.0.1:8091", False
    )
    words = shlex.split(serving.status_command())
    given = dict(w.split("=", 1) for w in words if w.startswith("TRACEJUDGE_"))
    for name in os.environ:
        if name.startswith("TRACEJUDGE_"):
            monkeypatch.delenv(name)
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.redis_url == redis_url
    assert settings.kafka_bootstrap == "127.0.0.1:9092" and settings.topic_prefix == "demo-"
    command = [w for w in words if not w.startswith("TRACEJUDGE_")]
    assert command == [".venv/bin/tracejudge", "status", "--worker", "http://127.0.0.1:8091"]
    assert "TRACEJUDGE_REDIS_URL" in _epilog("status")  # `status --help` says it reads it
