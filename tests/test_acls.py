"""What each role is granted, read from `role_grants`: the worker alone writes the outputs, the
explorer writes nothing, every topic the worker creates is one it may manage. Applied for real in
tests/integration/test_kafka_acls.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.streams.kafka.acls import (
    DEFAULT_PRINCIPALS,
    ROLES,
    Grant,
    bindings,
    kafka_acls_commands,
    parse_principals,
    role_grants,
)
from tracejudge.streams.kafka.admin import topic_specs


def settings() -> Settings:
    return Settings(topic_prefix="team-a.", app_id="team-a-judge", redis_url="")


def allowed(grants: list[Grant], operation: str) -> set[str]:
    return {g.name for g in grants if operation in g.operations and g.resource == "topic"}


def test_only_the_worker_writes_what_agents_act_on() -> None:
    s = settings()
    grants = role_grants(s)
    outputs = {s.topic(n) for n in names.OUTPUTS}
    for role in ROLES:
        written = allowed(grants[role], "Write")
        if role == "worker":
            assert outputs <= written
        else:
            assert not written & outputs, role
    assert allowed(grants["explorer"], "Write") == set()
    assert allowed(grants["outcomes"], "Read") == set()
    assert allowed(grants["agent"], "Write") == {s.topic(n) for n in names.INPUTS}
    assert s.topic(names.EVENTS) not in allowed(grants["agent"], "Read")  # others' traces


def test_every_topic_the_worker_creates_is_its_to_manage_and_nothing_else() -> None:
    s = settings()
    created = {spec.name for spec in topic_specs(s)}
    worker = role_grants(s)["worker"]
    managed = allowed(worker, "Create")
    assert created <= managed
    assert all(n.startswith(("team-a.", "team-a-judge-")) for n in managed)
    groups = {g.name for g in worker if g.resource == "group"}
    assert groups == {"team-a-judge", "team-a-judge" + names.JUDGE_GROUP_SUFFIX}
    assert all(g.pattern == "literal" for g in worker)  # no prefix wider than its own names


def test_principals_are_named_per_role_and_checked() -> None:
    assert parse_principals([]) == DEFAULT_PRINCIPALS
    chosen = parse_principals(["explorer=User:ui", "agent=User:team-a-agents"])
    assert chosen["explorer"] == "User:ui" and chosen["worker"] == "User:tracejudge-worker"
    for bad in ("viewer=User:x", "explorer", "explorer=ui", "explorer=User:"):
        with pytest.raises(ValueError, match="--principal"):
            parse_principals([bad])


def test_bindings_and_commands_name_the_same_grants() -> None:
    s = settings()
    grants = role_grants(s)
    made = bindings(grants, DEFAULT_PRINCIPALS)
    assert len(made) == sum(len(g.operations) for role in grants.values() for g in role)
    assert {b.principal for b in made} == set(DEFAULT_PRINCIPALS.values())
    lines = [
        line for line in kafka_acls_commands(grants, DEFAULT_PRINCIPALS, "k:9092") if line[0] != "#"
    ]
    mentioned = sum(
        line.count("--operation ") * (line.count("--topic ") + line.count("--group "))
        for line in lines
    )
    assert mentioned == len(made)
    assert any("--resource-pattern-type prefixed" in line for line in lines)


def test_the_command_prints_json_for_these_settings() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracejudge.streams.cli",
            "acls",
            "--json",
            "--principal",
            "worker=User:w",
        ],
        capture_output=True,
        text=True,
        env={"TRACEJUDGE_TOPIC_PREFIX": "team-b.", "PATH": ""},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert set(plan) == set(ROLES) and plan["worker"]["principal"] == "User:w"
    assert {
        "resource": "topic",
        "name": "team-b.events",
        "pattern": "literal",
        "operations": ["Write", "Describe"],
    } in plan["outcomes"]["grants"]


def test_the_printed_commands_say_what_admin_properties_holds_and_which_broker() -> None:
    def acls(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tracejudge.streams.cli", "acls"],
            capture_output=True, text=True, timeout=60, check=False,
            env={"PATH": "/usr/bin:/bin", "TRACEJUDGE_REDIS_URL": "", **env},
        )  # fmt: skip

    default = acls()
    assert default.returncode == 0
    assert "TRACEJUDGE_KAFKA_BOOTSTRAP is not set: using the default 127.0.0.1:9092" in (
        default.stderr
    )
    assert "#   security.protocol=PLAINTEXT" in default.stdout
    secured = acls(
        TRACEJUDGE_KAFKA_BOOTSTRAP="kafka-1:9093",
        TRACEJUDGE_KAFKA_SECURITY_PROTOCOL="SASL_SSL",
        TRACEJUDGE_KAFKA_SASL_MECHANISM="SCRAM-SHA-512",
        TRACEJUDGE_KAFKA_SASL_USERNAME="worker",
        TRACEJUDGE_KAFKA_SASL_PASSWORD="worker-secret-password",
    )
    assert secured.returncode == 0 and secured.stderr == ""
    out = secured.stdout
    assert "#   sasl.mechanism=SCRAM-SHA-512" in out and "ScramLoginModule required" in out
    assert "#   ssl.truststore.location=" in out
    assert "worker-secret-password" not in out  # the admin's credentials, never the worker's
    assert "--bootstrap-server kafka-1:9093" in out
