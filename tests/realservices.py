"""Start the real Apache Kafka (KRaft) and Redis the integration tests talk to.

Both run on free loopback ports in a temporary directory and are stopped at the end. Running
services are reused when TRACEJUDGE_KAFKA_BOOTSTRAP / TRACEJUDGE_REDIS_URL point at them.
Installation is scripts/ensure-services.sh's job.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tests.retried import note_retry, refuse_services_in_the_fast_tier

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports: the sockets stay bound until all are chosen, as the
    kernel hands the same port to two binds in a row about once in 10,000 (a broker given the
    same port for two listeners refuses to format)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def reachable(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def kafka_libs() -> Path:
    pom = (ROOT / "scripts" / "kafka" / "pom.xml").read_text()
    found = re.search(r"<kafka.version>(.+?)</kafka.version>", pom)
    assert found, "kafka.version missing from scripts/kafka/pom.xml"
    cache = Path(os.environ.get("TRACEJUDGE_CACHE", Path.home() / ".cache" / "tracejudge"))
    libs = cache / f"kafka-{found.group(1)}" / "libs"
    if not (libs / ".complete").exists():
        subprocess.run(["bash", str(ROOT / "scripts" / "ensure-services.sh")], check=True)
    return libs


@dataclass
class Service:
    address: str
    process: subprocess.Popen[bytes] | None
    log: Path | None = None
    args: list[str] | None = None  # to start it again on the same data and port

    def stop(self) -> None:
        stop_process(self.process)

    def kill9(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def restart(self, timeout_s: float = 90.0) -> None:
        assert self.args is not None and self.log is not None and self.process is not None
        assert self.process.poll() is not None, "still running"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT)
        # a broker's address is host:port, Redis's a URL
        port = urlparse(self.address if "://" in self.address else f"//{self.address}").port
        assert port is not None, self.address
        _wait_port(port, self.process, self.log, timeout_s)


def stop_process(process: subprocess.Popen[bytes] | None, timeout_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited after `timeout_s`."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


class ServiceExited(RuntimeError):
    """The service ended before it listened (on a fresh start most likely: its port was taken)."""


def _wait_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise ServiceExited(f"service exited with {process.returncode}; {log} ends:\n{tail}")
        if reachable("127.0.0.1", port):
            return
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"service not listening on {port} after {timeout_s}s; see {log}")


# storage and group settings every single-node test broker shares (and the secured ones)
SINGLE_NODE = """\
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
"""

KAFKA_PROPERTIES = (
    """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
"""
    + SINGLE_NODE
    + "log.retention.hours=2\n"
)

LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def start_kafka(workdir: Path, timeout_s: float = 90.0, reuse: bool = True) -> Service:
    """A single-node KRaft broker on loopback, auto-creation off like production should be;
    `reuse=False` for a test that stops its broker: never the shared one."""
    existing = os.environ.get("TRACEJUDGE_KAFKA_BOOTSTRAP") if reuse else None
    if existing:
        host, _, port_text = existing.split(",")[0].rpartition(":")
        if reachable(host, int(port_text)):
            return Service(existing, None)
    return launch_kafka(workdir, KAFKA_PROPERTIES, timeout_s=timeout_s)


def launch_kafka(
    workdir: Path,
    properties: str,
    values: dict[str, Any] | None = None,
    format_args: tuple[str, ...] = (),
    timeout_s: float = 90.0,
) -> Service:
    """Format and start the pinned Kafka with `properties`, a template filled with `port`,
    `cport`, `data` and `values`; `format_args` go to the storage tool (e.g. `--add-scram`)."""
    return _with_fresh_ports(
        lambda: _launch_kafka_once(workdir, properties, values or {}, format_args, timeout_s)
    )


def _with_fresh_ports(launch: Callable[[], Service], attempts: int = 3) -> Service:
    """`launch` again on new ports when the service exits before listening: a port chosen free
    can be taken (by any client's outgoing connection) before the service binds it."""
    refuse_services_in_the_fast_tier("broker or Redis")
    for _ in range(attempts - 1):
        try:
            return launch()
        except ServiceExited as exited:
            note_retry("a service started again on new ports", exited)
    return launch()


def _launch_kafka_once(
    workdir: Path,
    properties: str,
    values: dict[str, Any],
    format_args: tuple[str, ...],
    timeout_s: float,
) -> Service:
    libs = kafka_libs()
    java = shutil.which("java")
    assert java, "java not found: run scripts/ensure-services.sh"
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / "data", ignore_errors=True)  # a retry formats afresh
    port, cport = free_ports(2)
    props = workdir / "server.properties"
    props.write_text(properties.format(port=port, cport=cport, data=workdir / "data", **values))
    (workdir / "log4j.properties").write_text(LOG4J)
    classpath = f"{libs}/*"
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    formatted = subprocess.run(
        [
            java,
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            # `--cluster-id=` form: an id may start with "-" (1 in 64), which the
            # tool's argument parser would read as an option and fail on
            f"--cluster-id={cluster_id}",
            "-c",
            str(props),
            *format_args,
        ],
        capture_output=True,
        text=True,
    )
    if formatted.returncode != 0:
        # the tool's own words, not just its exit status: CI keeps only the test output
        raise RuntimeError(
            f"kafka storage format exited with {formatted.returncode}:\n"
            f"{formatted.stdout[-2000:]}{formatted.stderr[-4000:]}"
        )
    log = workdir / "kafka.log"
    args = [
        java,
        "-Xmx768m",
        "-XX:+UseG1GC",
        f"-Dlog4j.configuration=file:{workdir / 'log4j.properties'}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(props),
    ]
    process = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    _wait_port(port, process, log, timeout_s)
    return Service(f"127.0.0.1:{port}", process, log, args)


def start_redis(workdir: Path, timeout_s: float = 30.0) -> Service:
    existing = os.environ.get("TRACEJUDGE_REDIS_URL")
    if existing:
        url = urlparse(existing)
        if reachable(url.hostname or "127.0.0.1", url.port or 6379):
            return Service(existing, None)
    return launch_redis(workdir, ["--port", "{port}"], "redis://127.0.0.1:{port}/0", timeout_s)


def launch_redis(workdir: Path, listen: list[str], url: str, timeout_s: float = 30.0) -> Service:
    """redis-server on loopback without persistence; `listen` are the port options ("{port}"
    is the free port chosen), `url` the clients' URL with the same placeholder."""
    return _with_fresh_ports(lambda: _launch_redis_once(workdir, listen, url, timeout_s))


def _launch_redis_once(workdir: Path, listen: list[str], url: str, timeout_s: float) -> Service:
    server = shutil.which("redis-server")
    assert server, "redis-server not found: run scripts/ensure-services.sh"
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = workdir / "redis.log"
    options = [arg.format(port=port) for arg in listen]
    common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)]
    args = [server, *options, *common]
    process = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    _wait_port(port, process, log, timeout_s)
    return Service(url.format(port=port), process, log, args)  # args: `restart` on its port
