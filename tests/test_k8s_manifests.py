"""deploy/k8s validated offline: Kubernetes resources against the schemas `kubernetes-validate`
ships, KEDA's resources against the schemas pinned in deploy/k8s/schemas; and the few facts the
manifests must agree on with the worker."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tracejudge.models.errors import ConfigurationError
from tracejudge.settings import Settings
from tracejudge.streams.explorer.server import check_exposure

K8S = Path(__file__).resolve().parent.parent / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30.0"
PINNED = {
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-keda.sh-v1alpha1.json",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): "triggerauthentication-keda.sh-v1alpha1.json",
}


def resources() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    found = []
    for name in kustomization["resources"]:
        found += [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    return found


def of_kind(kind: str, name: str = "tracejudge") -> dict[str, Any]:
    [found] = [r for r in resources() if r["kind"] == kind and r["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize(
    "resource", resources(), ids=lambda r: f"{r['kind']}/{r['metadata']['name']}"
)
def test_every_manifest_validates_offline(resource: dict[str, Any]) -> None:
    pinned = PINNED.get((resource["apiVersion"], resource["kind"]))
    if pinned is not None:
        schema = json.loads((K8S / "schemas" / pinned).read_text())
        jsonschema.validate(resource, schema)
    else:
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def test_the_deployment_runs_safely_and_matches_the_worker() -> None:
    deployment = of_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [worker] = pod["containers"]
    config = of_kind("ConfigMap")["data"]
    port = int(config["TRACEJUDGE_WEB_PORT"])
    assert worker["ports"][0]["containerPort"] == port
    for probe in ("startupProbe", "readinessProbe"):
        assert worker[probe]["httpGet"]["path"] == "/health"
    assert pod["terminationGracePeriodSeconds"] > float(config["TRACEJUDGE_STOP_TIMEOUT_S"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert worker["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in worker["volumeMounts"]}
    assert config["TRACEJUDGE_DATA_DIR"] in mounts and "/tmp" in mounts
    assert worker["resources"]["requests"] and worker["resources"]["limits"]


def test_settings_are_known_and_replicas_stay_within_the_partitions() -> None:
    config = of_kind("ConfigMap")["data"]
    secrets = list(yaml.safe_load_all((K8S / "secret.example.yaml").read_text()))
    known = {f"TRACEJUDGE_{name.upper()}" for name in Settings.model_fields}
    names = set(config) | {
        k for secret in secrets for k in secret["stringData"] if k.startswith("TRACEJUDGE_")
    }
    assert names <= known, sorted(names - known)
    scaled = of_kind("ScaledObject")["spec"]
    assert scaled["maxReplicaCount"] <= int(config["TRACEJUDGE_PARTITIONS"])
    assert scaled["scaleTargetRef"]["name"] == of_kind("Deployment")["metadata"]["name"]
    trigger = scaled["triggers"][0]["metadata"]
    assert trigger["consumerGroup"] == config["TRACEJUDGE_APP_ID"]
    assert trigger["topic"] == config["TRACEJUDGE_TOPIC_PREFIX"] + "events"


def test_a_broken_manifest_is_refused() -> None:
    deployment = of_kind("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": "http"}]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    scaled = of_kind("ScaledObject")
    scaled["spec"]["maxReplicas"] = 3  # not a field: maxReplicaCount
    schema = json.loads(
        (K8S / "schemas" / PINNED[("keda.sh/v1alpha1", "ScaledObject")]).read_text()
    )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, schema)


def pod_specs() -> dict[str, dict[str, Any]]:
    return {
        r["metadata"]["name"]: r["spec"]["template"]["spec"]
        for r in resources()
        if r["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet")
    }


RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def restricted_violations(name: str, pod: dict[str, Any]) -> list[str]:
    """The restricted Pod Security Standard's rules (Kubernetes docs, v1.30), as a list of what
    breaks them."""
    found = []
    pod_ctx = pod.get("securityContext", {})
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            found.append(f"{name}: {key}")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"{name}: volume {volume['name']} of {kinds}")
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        ctx = container.get("securityContext", {})
        where = f"{name}/{container['name']}"
        if ctx.get("privileged"):
            found.append(f"{where}: privileged")
        if ctx.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}: allowPrivilegeEscalation must be false")
        if not (ctx.get("runAsNonRoot") or pod_ctx.get("runAsNonRoot")):
            found.append(f"{where}: runAsNonRoot must be true")
        if 0 in (ctx.get("runAsUser"), pod_ctx.get("runAsUser")):
            found.append(f"{where}: runs as root")
        seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{where}: seccompProfile must be RuntimeDefault or Localhost")
        capabilities = ctx.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{where}: capabilities must drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{where}: adds capabilities")
        if any(p.get("hostPort") for p in container.get("ports", [])):
            found.append(f"{where}: hostPort")
    return found


@pytest.mark.parametrize("name", sorted(pod_specs()))
def test_every_pod_meets_the_restricted_pod_security_standard(name: str) -> None:
    assert restricted_violations(name, pod_specs()[name]) == []


def test_the_restricted_check_catches_what_the_standard_forbids() -> None:
    job = pod_specs()["tracejudge-topics"]
    del job["securityContext"]["seccompProfile"]
    job["containers"][0]["securityContext"]["capabilities"] = {"add": ["SYS_ADMIN"]}
    job["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    problems = restricted_violations("job", job)
    assert len(problems) == 4, problems  # seccomp, drop ALL, the added capability, hostPath


def test_keda_owns_the_replicas_and_workers_spread_over_nodes() -> None:
    spec = of_kind("Deployment")["spec"]
    assert "replicas" not in spec  # an apply would reset what KEDA set
    keys = {c["topologyKey"] for c in spec["template"]["spec"]["topologySpreadConstraints"]}
    assert "kubernetes.io/hostname" in keys


def test_no_secret_with_placeholder_values_is_applied() -> None:
    applied = [r for r in resources() if r["kind"] == "Secret"]
    assert "tracejudge" not in {r["metadata"]["name"] for r in applied}  # secret.example.yaml
    for secret in applied:  # KEDA's settings only: no credential, no placeholder
        values = secret.get("stringData", {})
        assert not any("change-me" in str(v) for v in values.values())
        assert not any(re.search("PASSWORD|TOKEN|KEY", k, re.I) for k in values)


def test_the_explorer_is_guarded_by_the_token_and_reads_the_workers_settings() -> None:
    pod = of_kind("Deployment", "tracejudge-explorer")["spec"]["template"]["spec"]
    [explorer] = pod["containers"]
    assert explorer["command"] == ["tracejudge", "ui"]
    env = {e["name"]: e["value"] for e in explorer["env"]}
    config = of_kind("ConfigMap")["data"]
    settings = Settings.model_validate(
        {k[len("TRACEJUDGE_") :].lower(): v for k, v in {**config, **env}.items()}
    )
    assert settings.ui_host == "0.0.0.0" and not settings.ui_open
    with pytest.raises(ConfigurationError):  # started without the Secret's token: refused
        check_exposure(settings)
    examples = {
        d["metadata"]["name"]: d["stringData"]
        for d in yaml.safe_load_all((K8S / "secret.example.yaml").read_text())
    }
    assert "TRACEJUDGE_UI_TOKEN" in examples["tracejudge-explorer"]
    assert "TRACEJUDGE_UI_TOKEN" not in examples["tracejudge"]  # the workers never need it
    assert {"secretRef": {"name": "tracejudge-explorer"}} in explorer["envFrom"]
    service = of_kind("Service", "tracejudge-explorer")["spec"]
    assert service["ports"][0]["port"] == settings.ui_port
