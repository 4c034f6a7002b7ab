"""A three-node Apache Kafka (KRaft) cluster on loopback, from the same pinned jars as the single
broker in `realservices.py`, for the broker fault and scaling tests.

Every node is both broker and controller (a 3-voter quorum), so any one of them can die and the
cluster keeps a controller, a leader for every partition and two in-sync replicas: topics are
replicated 3 times with `min.insync.replicas` 2, like a production cluster. Heaps are small
(three JVMs share CI's two cores) and `replica.lag.time.max.ms` is 10 s, so a paused broker
drops out of the in-sync replicas within a test's time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from tests.realservices import (
    LOG4J,
    Service,
    ServiceExited,
    _wait_port,
    free_ports,
    kafka_libs,
    stop_process,
)
from tests.retried import note_retry, refuse_services_in_the_fast_tier

NODES = 3
T = TypeVar("T")

CLUSTER_PROPERTIES = """\
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
replica.lag.time.max.ms=10000
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
unclean.leader.election.enable=false
log.retention.hours=2
"""

# Small heaps: three brokers, a worker and the test share two cores and a CI runner's memory.
JVM_OPTIONS = ["-Xmx256m", "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


@dataclass
class Cluster:
    nodes: dict[int, Service]  # node id -> its broker process
    workdir: Path

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes.values())

    def stop(self) -> None:
        """SIGTERM to all at once, SIGKILL after 10 s: one by one, the last nodes wait for a
        quorum that is gone (37 s for three), and the data is thrown away anyway."""
        for node in self.nodes.values():
            self.resume(node)  # a stopped process ignores SIGTERM until continued
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
        deadline = time.monotonic() + 10
        for node in self.nodes.values():
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=10)

    def kill9(self, node_id: int) -> None:
        self.resume(self.nodes[node_id])
        self.nodes[node_id].kill9()

    async def restart(self, node_id: int, timeout_s: float = 90.0) -> None:
        """Start a killed node again on its data and ports, and wait until it is back in the
        cluster's metadata."""
        self.nodes[node_id].restart(timeout_s)
        # asked of every node: one that has not yet seen the node die and come back lists the
        # dead node's stale registration, the restarted one lists itself once unfenced
        await self.wait_brokers(NODES, timeout_s, every_node=True)

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing (a long GC pause, a
        frozen VM)."""
        process = self.nodes[node_id].process
        assert process is not None and process.poll() is None
        os.kill(process.pid, signal.SIGSTOP)

    def resume(self, node: Service | int) -> None:
        service = self.nodes[node] if isinstance(node, int) else node
        if service.process is not None and service.process.poll() is None:
            os.kill(service.process.pid, signal.SIGCONT)

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.process and n.process.poll() is None]

    async def _ask(
        self,
        call: Callable[[AIOKafkaAdminClient], Awaitable[T]],
        via: int | None = None,
        timeout_s: float = 30.0,
    ) -> T:
        """`call` with an admin client of the running nodes (of node `via` alone), asked again
        on an error: the metadata can still list a node just killed, and the client may pick
        it; a coordinator can be unavailable while the offsets topic is made or moves."""
        ids = [via] if via is not None else self.running()
        addresses = ",".join(self.nodes[i].address for i in ids)
        deadline = time.monotonic() + timeout_s
        while True:
            admin = AIOKafkaAdminClient(bootstrap_servers=addresses, request_timeout_ms=5000)
            try:
                await admin.start()
                return await call(admin)
            except (KafkaError, OSError, TimeoutError):
                if time.monotonic() > deadline:
                    raise
            finally:
                await admin.close()
            await asyncio.sleep(0.3)

    async def brokers(self, via: int | None = None, timeout_s: float = 30.0) -> list[int]:
        """The node ids the cluster's metadata lists as brokers now (as node `via` sees it)."""

        async def listed(admin: AIOKafkaAdminClient) -> list[int]:
            described = await admin.describe_cluster()
            return sorted(int(b["node_id"]) for b in described["brokers"])

        return await self._ask(listed, via, timeout_s)

    async def wait_brokers(
        self, count: int, timeout_s: float = 60.0, every_node: bool = False
    ) -> None:
        deadline = time.monotonic() + timeout_s
        seen: list[list[int]] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # a node still starting refuses or times out
                vias: list[int | None] = [*self.running()] if every_node else [None]
                seen = [await self.brokers(via, timeout_s=2) for via in vias]
                if all(len(s) == count for s in seen):
                    return
            await asyncio.sleep(0.3)
        raise RuntimeError(f"{count} brokers expected, metadata lists {seen} after {timeout_s}s")

    async def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> node id of its leader (-1: none)."""
        return {p: leader for p, (leader, _isr) in (await self.partitions(topic)).items()}

    async def partitions(
        self, topic: str, via: int | None = None
    ) -> dict[int, tuple[int, list[int]]]:
        """Partition -> (leader node id, in-sync replicas) (as node `via` sees it: a paused node
        is still "running", and a client that picks it waits for its timeout)."""

        async def described(admin: AIOKafkaAdminClient) -> dict[int, tuple[int, list[int]]]:
            (topic_info,) = await admin.describe_topics([topic])
            return {
                int(p["partition"]): (int(p["leader"]), sorted(int(r) for r in p["isr"]))
                for p in topic_info["partitions"]
            }

        return await self._ask(described, via)

    async def coordinator_of(self, group_id: str, timeout_s: float = 30.0) -> int:
        """The node id of the group's coordinator."""

        async def found(admin: AIOKafkaAdminClient) -> int:
            return int(await admin.find_coordinator(group_id))

        return await self._ask(found, timeout_s=timeout_s)

    async def wait_in_sync(self, topics: list[str], timeout_s: float = 60.0) -> None:
        """Until every partition of `topics` has all nodes in sync (after a restart)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                states = [await self.partitions(t) for t in topics]
                if all(len(isr) == NODES for s in states for _, isr in s.values()):
                    return
            await asyncio.sleep(0.5)
        raise RuntimeError(f"replicas of {topics} not all in sync after {timeout_s}s")


def start_cluster(workdir: Path, timeout_s: float = 90.0, attempts: int = 3) -> Cluster:
    """Format and start three nodes, and return when the metadata lists all three brokers.

    Started again on new ports when a node exits before listening (a port chosen free was taken
    by then) or the cluster does not form within `timeout_s`."""
    refuse_services_in_the_fast_tier("Kafka cluster")
    for attempt in range(attempts):
        try:
            return _start_once(workdir / f"try{attempt}", timeout_s)
        except (ServiceExited, RuntimeError) as failed:
            if attempt == attempts - 1:
                raise
            note_retry("the three-node cluster started again", failed)
    raise AssertionError("unreachable")


def _start_once(workdir: Path, timeout_s: float) -> Cluster:
    libs = kafka_libs()
    java = shutil.which("java")
    assert java, "java not found: run scripts/ensure-services.sh"
    workdir.mkdir(parents=True, exist_ok=True)
    ports = free_ports(2 * NODES)
    ids = list(range(1, NODES + 1))
    port = dict(zip(ids, ports[:NODES], strict=True))
    cport = dict(zip(ids, ports[NODES:], strict=True))
    voters = ",".join(f"{i}@127.0.0.1:{cport[i]}" for i in ids)
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    classpath = f"{libs}/*"
    (workdir / "log4j.properties").write_text(LOG4J)
    cluster = Cluster({}, workdir)
    try:
        for i in ids:
            node_dir = workdir / f"node{i}"
            node_dir.mkdir()
            props = node_dir / "server.properties"
            props.write_text(
                CLUSTER_PROPERTIES.format(
                    node_id=i, voters=voters, port=port[i], cport=cport[i], data=node_dir / "data"
                )
            )
            _format(java, classpath, cluster_id, props)
            log = node_dir / "kafka.log"
            args = [
                java,
                *JVM_OPTIONS,
                f"-Dlog4j.configuration=file:{workdir / 'log4j.properties'}",
                "-cp",
                classpath,
                "kafka.Kafka",
                str(props),
            ]
            process = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
            cluster.nodes[i] = Service(f"127.0.0.1:{port[i]}", process, log, args)
        deadline = time.monotonic() + timeout_s
        for i in ids:
            node = cluster.nodes[i]
            assert node.process is not None and node.log is not None
            _wait_port(port[i], node.process, node.log, max(1.0, deadline - time.monotonic()))
        asyncio.run(
            cluster.wait_brokers(NODES, max(1.0, deadline - time.monotonic()), every_node=True)
        )
    except BaseException:
        for node in cluster.nodes.values():
            stop_process(node.process, timeout_s=5)
        raise
    return cluster


def _format(java: str, classpath: str, cluster_id: str, props: Path) -> None:
    # the JVM options too: the storage tool is a JVM of its own, three of them in a row
    formatted = subprocess.run(
        [
            java,
            *JVM_OPTIONS,
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id}",  # `=`: an id may start with "-"
            "-c",
            str(props),
        ],
        capture_output=True,
        text=True,
    )
    if formatted.returncode != 0:
        raise RuntimeError(
            f"kafka storage format exited with {formatted.returncode}:\n"
            f"{formatted.stdout[-2000:]}{formatted.stderr[-4000:]}"
        )
