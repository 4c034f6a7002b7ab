"""deploy/k8s validated offline: Kubernetes resources against the schemas `kubernetes-validate`
ships, KEDA's resources against the schemas pinned in deploy/k8s/schemas; and the few facts the
manifests must agree on with the worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tracejudge.streams.settings import Settings

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


def of_kind(kind: str) -> dict[str, Any]:
    [found] = [r for r in resources() if r["kind"] == kind]
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
    secret = next(
        r for r in resources() if r["kind"] == "Secret" and r["metadata"]["name"] == "tracejudge"
    )
    known = {f"TRACEJUDGE_{name.upper()}" for name in Settings.model_fields}
    names = set(config) | {k for k in secret["stringData"] if k.startswith("TRACEJUDGE_")}
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
