"""The deployments run each role under its own Kafka principal, the one `tracejudge acls` grants:
the compose override's users and broker settings, and the k8s Secrets each workload reads. The
grants themselves are tested on a real broker (tests/integration/test_kafka_acls.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.secure_services import AUTHORIZER_PROPERTIES
from tracejudge.settings import unknown_names
from tracejudge.streams.kafka.acls import DEFAULT_PRINCIPALS, ROLES

ROOT = Path(__file__).resolve().parents[1]
USERS = {role: DEFAULT_PRINCIPALS[role].removeprefix("User:") for role in ROLES}
# who runs as whom: the admin applies the ACLs, the OTLP receiver as a role of its own
COMPOSE_ROLES = {"acls": None, "topics": "operator", "worker": "worker", "otel": "receiver"}
COMPOSE_ROLES["explorer"] = "explorer"


def override() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "deploy" / "compose" / "acls.yml").read_text())["services"])


def test_compose_runs_each_service_as_its_roles_user() -> None:
    services = override()
    assert set(COMPOSE_ROLES) <= set(services)
    for name, role in COMPOSE_ROLES.items():
        env = services[name]["environment"]
        assert unknown_names({k: v for k, v in env.items() if k.startswith("TRACEJUDGE_")}) == []
        assert env["TRACEJUDGE_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
        assert env["TRACEJUDGE_KAFKA_SASL_USERNAME"] == (USERS[role] if role else "admin"), name
    assert services["acls"]["command"] == ["tracejudge", "acls", "--apply"]
    assert "acls" in services["topics"]["depends_on"]


def test_compose_broker_has_every_user_and_the_tested_authorizer() -> None:
    kafka = override()["kafka"]["environment"]
    for listener in ("INTERNAL", "HOST"):
        jaas = kafka[f"KAFKA_LISTENER_NAME_{listener}_PLAIN_SASL_JAAS_CONFIG"]
        assert set(re.findall(r"user_([\w-]+)=", jaas)) == {"admin", *USERS.values()}
    # the same settings as the broker the ACL test runs (Kafka's image: KAFKA_A_B -> a.b)
    tested = dict(
        line.split("=", 1)
        for line in AUTHORIZER_PROPERTIES.format(
            port=0, cport=0, data="", admin="admin", admin_password="", users=""
        ).splitlines()
        if "=" in line and not line.endswith("\\")
    )
    for key in ("authorizer.class.name", "allow.everyone.if.no.acl.found", "super.users"):
        assert kafka["KAFKA_" + key.upper().replace(".", "_")] == tested[key], key
    assert "SASL_PLAINTEXT" in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    assert "PLAINTEXT" not in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].replace(
        "SASL_PLAINTEXT", ""
    ).replace("CONTROLLER:PLAINTEXT", "")


def test_every_password_compose_asks_for_is_in_the_example_env() -> None:
    text = (ROOT / "deploy" / "compose" / "acls.yml").read_text()
    asked = set(re.findall(r"\$\{(\w+):\?", text))
    example = (ROOT / "deploy" / "compose" / "acls.env.example").read_text()
    given = set(re.findall(r"^(\w+)=", example, re.M))
    assert asked == given and len(asked) == len(ROLES) + 1


def k8s(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / name).read_text()) if d]


def test_k8s_workloads_read_their_roles_secret() -> None:
    secrets = {d["metadata"]["name"]: d["stringData"] for d in k8s("secret.example.yaml")}
    user = {name: s["TRACEJUDGE_KAFKA_SASL_USERNAME"] for name, s in secrets.items()}
    assert user == {
        "tracejudge": USERS["worker"],
        "tracejudge-explorer": USERS["explorer"],
        "tracejudge-operator": USERS["operator"],
        "tracejudge-kafka-admin": "admin",
    }
    wanted = {
        ("deployment.yaml", "tracejudge"): "tracejudge",
        ("explorer.yaml", "tracejudge-explorer"): "tracejudge-explorer",
        ("topics-job.yaml", "tracejudge-topics"): "tracejudge-operator",
        ("acls-job.yaml", "tracejudge-acls"): "tracejudge-kafka-admin",
    }
    for (file, workload), secret in wanted.items():
        [found] = [
            d
            for d in k8s(file)
            if d["kind"] in ("Deployment", "Job") and d["metadata"]["name"] == workload
        ]
        [container] = found["spec"]["template"]["spec"]["containers"]
        refs = [e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e]
        assert refs == [secret], workload
    [job] = k8s("acls-job.yaml")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "tracejudge",
        "acls",
        "--apply",
    ]
    kustomization = yaml.safe_load((ROOT / "deploy" / "k8s" / "kustomization.yaml").read_text())
    assert "acls-job.yaml" in kustomization["resources"]
