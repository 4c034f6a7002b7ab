"""docker-compose.yml works on first try: read as Compose reads it (YAML), without Docker."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tracejudge.settings import Settings, unknown_names
from tracejudge.streams.explorer.server import check_exposure

ROOT = Path(__file__).resolve().parents[1]


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"])


def env(service: dict[str, Any]) -> dict[str, str]:
    given = service.get("environment") or {}
    return {str(k): str(v) for k, v in given.items()}


def test_kafka_has_a_listener_for_the_containers_and_one_for_the_host() -> None:
    services = compose()
    kafka = env(services["kafka"])
    advertised = {
        name: address
        for name, _, address in (
            item.partition("://") for item in kafka["KAFKA_ADVERTISED_LISTENERS"].split(",")
        )
    }
    host_ports = {p.rsplit(":", 2)[-1] for p in services["kafka"]["ports"]}
    # what the host is told to connect to is published to the host
    assert any(
        a.startswith("localhost:") and a.split(":")[1] in host_ports for a in advertised.values()
    )
    # and every tracejudge container uses an address advertised for the containers
    for name, service in services.items():
        bootstrap = env(service).get("TRACEJUDGE_KAFKA_BOOTSTRAP")
        if bootstrap is not None:
            assert bootstrap in advertised.values() and not bootstrap.startswith("localhost"), name


def test_every_image_is_pinned_and_every_service_has_a_healthcheck() -> None:
    for name, service in compose().items():
        if "image" in service:
            image, _, tag = service["image"].rpartition(":")
            assert image and re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: {service['image']}"
        one_shot = service.get("restart") == "no"
        assert one_shot or "healthcheck" in service, f"{name} has no healthcheck"


def test_ports_are_published_on_loopback_only() -> None:
    for name, service in compose().items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port}"


def test_the_worker_volume_is_created_by_the_image_for_the_workers_user() -> None:
    worker = compose()["worker"]
    [volume] = worker["volumes"]
    mount = volume.split(":")[1]
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert f"TRACEJUDGE_DATA_DIR={mount}" in dockerfile
    assert re.search(rf"mkdir -p {re.escape(mount)} && chown tracejudge:tracejudge", dockerfile)
    assert "USER tracejudge" in dockerfile


def test_every_tracejudge_service_is_configured_with_known_settings_and_the_explorer_is_safe() -> (
    None
):
    services = compose()
    assert {"worker", "otel", "explorer"} <= set(services)
    for name, service in services.items():
        given = {k: v for k, v in env(service).items() if k.startswith("TRACEJUDGE_")}
        if not given:
            continue
        assert unknown_names(given) == [], name
        settings = Settings.model_validate(
            {k[len("TRACEJUDGE_") :].lower(): v for k, v in given.items()}
        )
        if service.get("command") == ["tracejudge", "ui"]:
            check_exposure(settings)  # raises when it would serve without a token in the open
            ports = [str(p) for p in service["ports"]]
            assert ports == [f"127.0.0.1:{settings.ui_port}:{settings.ui_port}"]
