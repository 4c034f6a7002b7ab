"""Kafka over SASL_SSL (SCRAM-SHA-512) and Redis over TLS with a least-privilege ACL user, for
real: a worker, `publish` and `tail` end to end; a wrong password and an untrusted CA each stop
a command at start with one clear line."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.integration.harness import WorkerProcess, worker_env
from tests.realservices import Service
from tests.secure_services import (
    KAFKA_PASSWORD,
    KAFKA_USER,
    Tls,
    cli,
    make_tls,
    start_kafka_sasl_ssl,
    start_redis_tls,
)
from tracejudge.streams.demo.samples import sample_traces

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Tls, Service, Service]]:
    workdir = tmp_path_factory.mktemp("secure")
    tls = make_tls(workdir / "tls")
    kafka = start_kafka_sasl_ssl(workdir / "kafka", tls)
    try:
        cache = start_redis_tls(workdir / "redis", tls)
    except Exception:
        kafka.stop()
        raise
    yield tls, kafka, cache
    kafka.stop()
    cache.stop()


def secure_env(tls: Tls, kafka: Service, cache: Service, **overrides: str) -> dict[str, str]:
    env = {
        "TRACEJUDGE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "TRACEJUDGE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "TRACEJUDGE_KAFKA_SASL_USERNAME": KAFKA_USER,
        "TRACEJUDGE_KAFKA_SASL_PASSWORD": KAFKA_PASSWORD,
        "TRACEJUDGE_KAFKA_SSL_CAFILE": str(tls.ca),
        "TRACEJUDGE_REDIS_URL": f"{cache.address}?ssl_ca_certs={tls.ca}",
    }
    env.update(overrides)
    return env


async def test_worker_publish_and_tail_over_sasl_ssl_with_tls_redis(
    secure: tuple[Tls, Service, Service], tmp_path: Path
) -> None:
    tls, kafka, cache = secure
    base = worker_env(kafka.address, cache.address, tmp_path, "secure")
    env = {**base, **secure_env(tls, kafka, cache)}
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        traces = sample_traces("secure")[:3]
        path = tmp_path / "traces.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for t in traces for e in t.events))
        published = await asyncio.to_thread(cli, env, "publish", str(path))
        assert published.returncode == 0, published.stderr
        rids = {t.request_id for t in traces}
        deadline, seen = time.monotonic() + 60, set[str]()
        while seen != rids and time.monotonic() < deadline:
            tailed = await asyncio.to_thread(
                cli, env, "tail", "evaluations", "--json", "--from-beginning", "--idle-exit", "2"
            )
            seen = {json.loads(line)["request_id"] for line in tailed.stdout.splitlines()}
        assert seen == rids, worker.tail()
        # stored over TLS by the ACL user, which can touch tracejudge's keys and nothing else
        client = redis.from_url(cache.address, ssl_ca_certs=str(tls.ca))
        for rid in rids:
            assert client.get(f"tracejudge:evaluation:{rid}") is not None
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.get("someone-elses-key")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.flushall()
        client.close()
    finally:
        worker.stop()


@pytest.mark.parametrize(
    ("override", "says"),
    [
        (
            {"TRACEJUDGE_KAFKA_SASL_PASSWORD": "not-the-password"},
            "refused the credentials of tracejudge (SCRAM-SHA-512)",
        ),
        ("untrusted", "presented a certificate that is not trusted"),
    ],
)
def test_a_wrong_password_or_an_untrusted_ca_fails_at_start_with_one_line(
    secure: tuple[Tls, Service, Service],
    tmp_path: Path,
    override: dict[str, str] | str,
    says: str,
) -> None:
    tls, kafka, cache = secure
    if override == "untrusted":
        other = make_tls(tmp_path / "other-ca")
        override = {"TRACEJUDGE_KAFKA_SSL_CAFILE": str(other.ca)}
    assert isinstance(override, dict)
    env = {
        "TRACEJUDGE_KAFKA_BOOTSTRAP": kafka.address,
        "TRACEJUDGE_DATA_DIR": str(tmp_path / "data"),
        **secure_env(tls, kafka, cache, **override),
    }
    for command in (["worker"], ["publish", "-"], ["tail", "alerts", "--idle-exit", "1"]):
        result = cli(env, *command)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.startswith("tracejudge:")]
        assert len(lines) == 1 and says in lines[0], (command, result.stderr)
