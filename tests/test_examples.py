"""The examples' command line, without a broker: each answers `--help` with its usage, and
publishes to the broker `--bootstrap` (or TRACEJUDGE_KAFKA_BOOTSTRAP) names, never to the
default one when another is given. Each running against a real worker:
tests/integration/test_integrations.py."""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.realservices import ROOT

EXAMPLES = [
    "otel_agent",
    "langgraph_agent",
    "openai_agents_agent",
    "langgraph_loop_stop",
    "langgraph_reflection",
    "loop_steer",
]
CONNECTED_WITHIN_S = 60.0  # the example's imports (LangGraph, the Agents SDK) on a busy box


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_example_answers_help_with_its_usage(
    example: str, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module(f"examples.{example}")
    with pytest.raises(SystemExit) as exited:
        module.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m examples.{example} ")
    assert "--bootstrap HOST:PORT" in out and "TRACEJUDGE_KAFKA_BOOTSTRAP" in out
    assert "--topic-prefix" in out
    assert module.__doc__ is not None and module.__doc__.split()[1] in out  # what it does


@contextlib.contextmanager
def listener() -> Iterator[socket.socket]:
    """A loopback port that takes connections and says nothing: a broker that never answers."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.2)
        yield server


def address(server: socket.socket) -> str:
    return f"127.0.0.1:{server.getsockname()[1]}"


def connected(servers: list[socket.socket], timeout_s: float) -> list[bool]:
    """Which of the listeners took a connection within `timeout_s`."""
    seen = [False] * len(servers)
    deadline = time.monotonic() + timeout_s
    while not all(seen) and time.monotonic() < deadline:
        for i, server in enumerate(servers):
            if seen[i]:
                continue
            with contextlib.suppress(TimeoutError):
                server.accept()[0].close()
                seen[i] = True
    return seen


def test_an_example_publishes_to_the_broker_it_is_given() -> None:
    """--bootstrap, with TRACEJUDGE_KAFKA_BOOTSTRAP naming another broker: the option wins;
    the variable alone, in the example that also runs a reflection worker. A broker that takes
    the connection and never answers: each is stopped once it has connected (every example
    reads its options alike, `examples/_common.py`; two of them, for the time they take to
    import on a busy machine)."""
    with listener() as given, listener() as by_env, listener() as elsewhere:
        env = {**os.environ, "TRACEJUDGE_KAFKA_BOOTSTRAP": address(elsewhere)}
        runs = [
            (["examples.otel_agent", "--bootstrap", address(given)], env),
            (
                ["examples.langgraph_reflection", "--orders", "1"],
                env | {"TRACEJUDGE_KAFKA_BOOTSTRAP": address(by_env)},
            ),
        ]
        processes = []
        try:
            for command, run_env in runs:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", *command],
                        cwd=ROOT,
                        env=run_env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            assert connected([given, by_env], CONNECTED_WITHIN_S) == [True, True]
            assert connected([elsewhere], 0.5) == [False]  # the option won over the variable
        finally:
            for process in processes:
                process.kill()
                process.wait(30)
