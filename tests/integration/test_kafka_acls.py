"""The ACLs `tracejudge acls` writes, on a real KRaft broker with the authorizer on: each role
does its work under its own principal and nothing more. An agent cannot write to the control or
evaluations topics, the explorer cannot write at all, the worker runs under its own."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.integration.harness import WorkerProcess, worker_env
from tests.realservices import Service, free_port, kafka_libs
from tests.secure_services import ADMIN_PASSWORD, ADMIN_USER, cli, start_kafka_with_acls
from tracejudge.client.verdicts import evaluation_from_topic
from tracejudge.models import names
from tracejudge.streams.demo.samples import sample_traces

pytestmark = pytest.mark.integration

ROLES = ("worker", "agent", "receiver", "outcomes", "explorer", "operator")
PASSWORDS = {f"tracejudge-{role}": f"{role}-secret-1" for role in ROLES}
TEAMS = ("payments", "search")  # `tracejudge acls --team NAME`: User:tracejudge-agent-NAME
PASSWORDS.update({f"tracejudge-agent-{team}": f"{team}-secret-1" for team in TEAMS})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    kafka = start_kafka_with_acls(tmp_path_factory.mktemp("acl-kafka"), PASSWORDS)
    yield kafka
    kafka.stop()


def as_user(base: dict[str, str], user: str, password: str) -> dict[str, str]:
    return {
        **base,
        "TRACEJUDGE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "TRACEJUDGE_KAFKA_SASL_MECHANISM": "PLAIN",
        "TRACEJUDGE_KAFKA_SASL_USERNAME": user,
        "TRACEJUDGE_KAFKA_SASL_PASSWORD": password,
    }


def as_role(base: dict[str, str], role: str) -> dict[str, str]:
    user = f"tracejudge-{role}"
    return as_user(base, user, PASSWORDS[user])


def librdkafka(kafka: Service, role: str) -> dict[str, Any]:
    user = f"tracejudge-{role}"
    return {
        "bootstrap.servers": kafka.address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }


def produce(kafka: Service, role: str, topic: str) -> int:
    """The error code of one produced record (0: written)."""
    codes: list[int] = []
    producer = Producer({**librdkafka(kafka, role), "message.timeout.ms": 10_000})
    producer.produce(
        topic,
        b'{"type": "outcome", "request_id": "someone-else", "ok": false}',
        b"someone-else",
        on_delivery=lambda err, _msg: codes.append(err.code() if err else 0),
    )
    producer.flush(20)
    assert codes, f"no delivery report for {role} -> {topic}"
    return codes[0]


def read_error(kafka: Service, role: str, topic: str) -> int:
    """The error code of reading the start of `topic`'s partition 0 (0: a record read, or none
    there and no error within a few seconds)."""
    consumer = Consumer({**librdkafka(kafka, role), "group.id": "unused-never-joined"})
    try:
        described = consumer.list_topics(topic, timeout=10).topics[topic]
        if described.error is not None:  # not even allowed to know of the topic
            return int(described.error.code())
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is None:
                return 0
            # a group given only because librdkafka requires one: never joined, but its
            # coordinator is looked up, and refused, for roles that have no group
            if error.code() not in (
                KafkaError._PARTITION_EOF,
                KafkaError.GROUP_AUTHORIZATION_FAILED,
            ):
                return int(error.code())
        return 0
    finally:
        consumer.close()


async def test_each_role_works_under_its_own_principal_and_no_further(
    broker: Service, tmp_path: Path
) -> None:
    base = worker_env(broker.address, "", tmp_path, "acls", redis_url="")
    prefix = base["TRACEJUDGE_TOPIC_PREFIX"]
    admin = as_user(base, ADMIN_USER, ADMIN_PASSWORD)
    # before any ACL: the authorizer refuses everyone but the admin
    refused = await asyncio.to_thread(cli, as_role(base, "operator"), "topics")
    assert refused.returncode != 0 and "Authorization" in refused.stderr, refused.stderr
    for _ in range(2):  # applying again changes nothing and still succeeds
        applied = await asyncio.to_thread(cli, admin, "acls", "--apply")
        assert applied.returncode == 0, applied.stderr
        assert "applied" in applied.stdout and "User:tracejudge-worker" in applied.stdout

    created = await asyncio.to_thread(cli, as_role(base, "operator"), "topics")
    assert created.returncode == 0, created.stderr
    worker = WorkerProcess(as_role(base, "worker"), tmp_path / "worker.log").start()
    try:
        traces = sample_traces("acls")[:3]
        path = tmp_path / "traces.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for t in traces for e in t.events))
        published = await asyncio.to_thread(cli, as_role(base, "agent"), "publish", str(path))
        assert published.returncode == 0, published.stderr
        rids = {t.request_id for t in traces}
        deadline, seen = time.monotonic() + 90, set[str]()
        while seen != rids and time.monotonic() < deadline:
            tailed = await asyncio.to_thread(
                cli,
                as_role(base, "explorer"),
                "tail",
                "evaluations",
                "--json",
                "--from-beginning",
                "--idle-exit",
                "2",
            )
            seen = {json.loads(line)["request_id"] for line in tailed.stdout.splitlines()}
        assert seen == rids, worker.tail()
        # an agent reads its verdict back from the topic with the client's own reader
        rid = sorted(rids)[0]
        verdict = await asyncio.to_thread(
            evaluation_from_topic,
            broker.address,
            prefix + "evaluations",
            rid,
            20.0,
            {k: v for k, v in librdkafka(broker, "agent").items() if k != "bootstrap.servers"},
        )
        assert verdict is not None and verdict.request_id == rid
    finally:
        worker.stop()

    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    for role, topic in [
        ("agent", "control"),
        ("agent", "evaluations"),
        ("outcomes", "control"),
        ("outcomes", "responses"),
        ("receiver", "control"),
        ("receiver", "responses"),
        ("explorer", "events"),
        ("explorer", "evaluations"),
        ("explorer", "control"),
        ("operator", "control"),
    ]:
        assert await asyncio.to_thread(produce, broker, role, prefix + topic) == denied, (
            role,
            topic,
        )
    for role, topic in [
        ("agent", "events"),
        ("receiver", "events"),
        ("outcomes", "events"),
        ("operator", "events"),
    ]:
        assert await asyncio.to_thread(produce, broker, role, prefix + topic) == 0, (role, topic)
    for role, topic in [
        ("outcomes", "evaluations"),
        ("explorer", "events"),
        ("agent", "alerts"),
        ("agent", "events"),  # one agent's team does not read another's traces
        ("receiver", "events"),  # reachable from every agent host: it reads nothing
        ("receiver", "control"),
        ("receiver", "evaluations"),
    ]:
        assert await asyncio.to_thread(read_error, broker, role, prefix + topic) == denied, (
            role,
            topic,
        )
    for role, topic in [("agent", "control"), ("agent", "reflections")]:
        assert await asyncio.to_thread(read_error, broker, role, prefix + topic) == 0, (role, topic)
    # the operator reads what it tails, not the open windows' steps in the tables' changelogs
    changelog = names.changelog_topic(base["TRACEJUDGE_APP_ID"], names.WINDOW_STEPS)
    assert await asyncio.to_thread(read_error, broker, "operator", changelog) == denied
    assert await asyncio.to_thread(read_error, broker, "operator", prefix + "dlq") == 0
    # nor can it move the worker's offsets past events it has not handled
    moved = await asyncio.to_thread(
        commit_error, broker, "operator", base["TRACEJUDGE_APP_ID"], prefix + "events"
    )
    assert moved == KafkaError.GROUP_AUTHORIZATION_FAILED


def join_error(kafka: Service, role: str, group: str, topic: str) -> int:
    """The error code of joining `group` to read `topic` (0: partitions assigned), as a
    reflection worker joins its group."""
    consumer = Consumer({**librdkafka(kafka, role), "group.id": group})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            error = None if message is None else message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                return int(error.code())
            if consumer.assignment():
                return 0
        return KafkaError._TIMED_OUT
    finally:
        consumer.close()


def commit_error(kafka: Service, role: str, group: str, topic: str) -> int:
    """The error code of committing an offset for `group` on `topic` (0: committed)."""
    consumer = Consumer({**librdkafka(kafka, role), "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1_000_000)], asynchronous=False)
        return 0
    except KafkaException as exc:
        return int(exc.args[0].code())
    finally:
        consumer.close()


async def test_a_team_joins_only_its_own_reflection_groups_and_reads_only_its_prefix(
    broker: Service, tmp_path: Path
) -> None:
    """Two teams on one cluster: each team's principal joins (and commits) only its own
    reflection groups, the shared agent role none of theirs; a team that runs its own
    deployment (its own topic prefix) keeps its control records from the other team."""
    shared = worker_env(broker.address, "", tmp_path, "teams", redis_url="")
    theirs = worker_env(broker.address, "", tmp_path, "search-only", redis_url="")
    for base, teams in ((shared, TEAMS), (theirs, ("search",))):
        admin = as_user(base, ADMIN_USER, ADMIN_PASSWORD)
        created = await asyncio.to_thread(cli, admin, "topics")
        assert created.returncode == 0, created.stderr
        for team in teams:
            applied = await asyncio.to_thread(cli, admin, "acls", "--apply", "--team", team)
            assert applied.returncode == 0, applied.stderr
            assert f"User:tracejudge-agent-{team}" in applied.stdout
            assert "User:tracejudge-worker" not in applied.stdout  # that team's role only
    refused = await asyncio.to_thread(cli, shared, "acls", "--team", "pay.ments")
    assert refused.returncode != 0 and "--team" in refused.stderr

    reflections = shared["TRACEJUDGE_TOPIC_PREFIX"] + "reflections"
    denied = KafkaError.GROUP_AUTHORIZATION_FAILED
    for role, group, code in [
        ("agent-payments", "tracejudge-reflections.payments.refunds", 0),
        ("agent-search", "tracejudge-reflections.search.all", 0),
        ("agent-payments", "tracejudge-reflections.search.all", denied),
        ("agent-search", "tracejudge-reflections.payments.refunds", denied),
        ("agent-payments", "tracejudge-reflections-all", denied),  # the shared role's groups
        ("agent", "tracejudge-reflections.payments.refunds", denied),
    ]:
        got = await asyncio.to_thread(join_error, broker, role, group, reflections)
        assert got == code, (role, group)
    control = theirs["TRACEJUDGE_TOPIC_PREFIX"] + "control"
    assert await asyncio.to_thread(read_error, broker, "agent-search", control) == 0
    for role in ("agent-payments", "agent"):
        assert await asyncio.to_thread(read_error, broker, role, control) == (
            KafkaError.TOPIC_AUTHORIZATION_FAILED
        ), role


def test_the_printed_commands_grant_what_apply_grants(broker: Service, tmp_path: Path) -> None:
    """The `kafka-acls.sh` lines, run with Kafka's own tool (the pinned jars), create exactly the
    bindings `--apply` creates, for principals of another name."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._acl import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
    )
    from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

    from tracejudge.settings import Settings
    from tracejudge.streams.kafka import acls

    base = worker_env(broker.address, "", tmp_path, "printed", redis_url="")
    principals = [f"--principal={role}=User:printed-{role}" for role in ROLES]
    printed = cli(as_user(base, ADMIN_USER, ADMIN_PASSWORD), "acls", *principals)
    assert printed.returncode == 0, printed.stderr
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{ADMIN_USER}" password="{ADMIN_PASSWORD}";\n'
    )
    java = ["java", "-cp", f"{kafka_libs()}/*", "kafka.admin.AclCommand"]
    for line in printed.stdout.splitlines():
        if line.startswith("#"):
            continue
        args = shlex.split(line)
        assert args[0] == "kafka-acls.sh"
        args[args.index("--command-config") + 1] = str(config)
        done = subprocess.run([*java, *args[1:]], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    settings = Settings(
        kafka_bootstrap=broker.address,
        topic_prefix=base["TRACEJUDGE_TOPIC_PREFIX"],
        app_id=base["TRACEJUDGE_APP_ID"],
        redis_url="",
    )
    names = {role: f"User:printed-{role}" for role in ROLES}
    wanted = {str(b) for b in acls.bindings(acls.role_grants(settings), names)}
    admin = AdminClient(
        {
            "bootstrap.servers": broker.address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": ADMIN_USER,
            "sasl.password": ADMIN_PASSWORD,
        }
    )
    everything = AclBindingFilter(  # None: any name, principal, host (the stubs say str)
        ResourceType.ANY,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found = admin.describe_acls(everything, request_timeout=30).result(timeout=30)
    created = {str(b) for b in found if b.principal.startswith("User:printed-")}
    assert created == wanted


def start_receiver(env: dict[str, str]) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRACEJUDGE_")}
    return subprocess.Popen(
        [sys.executable, "-m", "tracejudge.streams.cli", "otel"],
        env={**clean, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


async def test_the_otlp_receiver_publishes_under_its_own_principal(
    broker: Service, tmp_path: Path
) -> None:
    """`tracejudge otel` as the receiver role, which may write the events topic and read
    nothing: a span batch posted to it is answered once Kafka has its events."""
    base = worker_env(broker.address, "", tmp_path, "acls-receiver", redis_url="")
    admin = as_user(base, ADMIN_USER, ADMIN_PASSWORD)
    assert (await asyncio.to_thread(cli, admin, "acls", "--apply")).returncode == 0
    assert (await asyncio.to_thread(cli, as_role(base, "operator"), "topics")).returncode == 0
    port = free_port()
    env = {
        **as_role(base, "receiver"),
        "TRACEJUDGE_OTEL_HTTP_PORT": str(port),
        "TRACEJUDGE_OTEL_GRPC_PORT": str(free_port()),
    }
    receiver = await asyncio.to_thread(start_receiver, env)
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "invoke_agent bot",
        "startTimeUnixNano": "1000000000",
        "endTimeUnixNano": "2000000000",
        "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}}],
    }
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    try:
        status, deadline = 0, time.monotonic() + 60
        async with aiohttp.ClientSession() as session:
            while status != 200 and time.monotonic() < deadline:
                try:
                    async with session.post(
                        f"http://127.0.0.1:{port}/v1/traces", json=body
                    ) as answer:
                        status = answer.status
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.5)
        assert status == 200, (status, receiver.poll())
    finally:
        receiver.terminate()
        receiver.wait(timeout=20)
