"""What the demo prints about the services it uses: never a password from their URLs."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tracejudge.streams.demo.run import Serving, _redis
from tracejudge.streams.settings import Settings

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
