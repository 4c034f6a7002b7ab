"""Kafka with a SASL_SSL listener and Redis with TLS and an ACL user, generated per test run.

The pinned Apache Kafka (same jars as `realservices.py`) with SCRAM-SHA-512 users created at
format time; a CA and certificates made with the machine's `openssl`; everything on loopback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.realservices import SINGLE_NODE, Service, launch_kafka, launch_redis

STORE_PASSWORD = "store-secret"
KAFKA_USER, KAFKA_PASSWORD = "tracejudge", "kafka-secret-1"


@dataclass(frozen=True)
class Tls:
    ca: Path  # the CA certificate clients trust
    cert: Path  # the server certificate (127.0.0.1 and localhost)
    key: Path
    keystore: Path  # PKCS12 of cert and key, for Kafka


def make_tls(workdir: Path, name: str = "server") -> Tls:
    """A fresh CA and a server certificate it signed, for 127.0.0.1 and localhost."""
    workdir.mkdir(parents=True, exist_ok=True)
    ca_key, ca = workdir / "ca.key", workdir / "ca.pem"
    key, csr, cert = workdir / f"{name}.key", workdir / f"{name}.csr", workdir / f"{name}.pem"
    ext = workdir / f"{name}.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    keystore = workdir / f"{name}.p12"

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=tracejudge test CA",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        str(ext),
        "-out",
        str(cert),
    )
    openssl(
        "pkcs12",
        "-export",
        "-in",
        str(cert),
        "-inkey",
        str(key),
        "-out",
        str(keystore),
        "-passout",
        f"pass:{STORE_PASSWORD}",
    )
    return Tls(ca, cert, key, keystore)


SASL_SSL_PROPERTIES = (
    """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=SASL_SSL://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required \
username="{user}" password="{password}";
ssl.keystore.type=PKCS12
ssl.keystore.location={keystore}
ssl.keystore.password={store_password}
ssl.key.password={store_password}
ssl.truststore.type=PEM
ssl.truststore.location={ca}
ssl.endpoint.identification.algorithm=
"""
    + SINGLE_NODE
)


def start_kafka_sasl_ssl(workdir: Path, tls: Tls, timeout_s: float = 90.0) -> Service:
    """A single-node KRaft broker whose only client listener is SASL_SSL with SCRAM-SHA-512;
    the user is created at format time (`--add-scram`)."""
    return launch_kafka(
        workdir,
        SASL_SSL_PROPERTIES,
        {
            "user": KAFKA_USER,
            "password": KAFKA_PASSWORD,
            "keystore": tls.keystore,
            "store_password": STORE_PASSWORD,
            "ca": tls.ca,
        },
        ("--add-scram", f"SCRAM-SHA-512=[name={KAFKA_USER},password={KAFKA_PASSWORD}]"),
        timeout_s,
    )


REDIS_USER, REDIS_PASSWORD = "tracejudge", "redis-secret-1"
# least privilege: tracejudge's keys only, and the commands the worker and its clients use
REDIS_ACL = (
    f"user {REDIS_USER} on >{REDIS_PASSWORD} ~tracejudge:* resetchannels "
    "-@all +get +set +incr +expire +zadd +zremrangebyscore +zcard +multi +exec +ping"
)


def start_redis_tls(workdir: Path, tls: Tls, timeout_s: float = 30.0) -> Service:
    """redis-server with TLS only (no plaintext port), the default user off and one ACL user
    limited to `tracejudge:*`."""
    workdir.mkdir(parents=True, exist_ok=True)
    acl = workdir / "users.acl"
    acl.write_text(f"user default off\n{REDIS_ACL}\n")
    listen = [
        "--port", "0", "--tls-port", "{port}",
        "--tls-cert-file", str(tls.cert), "--tls-key-file", str(tls.key),
        "--tls-ca-cert-file", str(tls.ca), "--tls-auth-clients", "no",
        "--aclfile", str(acl),
    ]  # fmt: skip
    url = f"rediss://{REDIS_USER}:{REDIS_PASSWORD}@127.0.0.1:{{port}}/0"
    return launch_redis(workdir, listen, url, timeout_s)


ADMIN_USER, ADMIN_PASSWORD = "admin", "admin-secret-1"

# The compose file's broker (deploy/compose/acls.yml) has these same settings: Kafka's KRaft
# authorizer, no ACL meaning deny, an admin the only super user beside the controller listener's
# own (PLAINTEXT, loopback only, never given to clients: its principal is User:ANONYMOUS).
AUTHORIZER_PROPERTIES = (
    """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=\
org.apache.kafka.common.security.plain.PlainLoginModule required \
username="{admin}" password="{admin_password}" {users};
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:{admin};User:ANONYMOUS
"""
    + SINGLE_NODE
)


def start_kafka_with_acls(workdir: Path, users: dict[str, str], timeout_s: float = 90.0) -> Service:
    """A single-node KRaft broker with the authorizer on and SASL/PLAIN users: `users` (name ->
    password) and the admin, who alone may do anything before ACLs are added."""
    jaas = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return launch_kafka(
        workdir,
        AUTHORIZER_PROPERTIES,
        {
            "admin": ADMIN_USER,
            "admin_password": ADMIN_PASSWORD,
            "users": f'user_{ADMIN_USER}="{ADMIN_PASSWORD}" {jaas}',
        },
        (),
        timeout_s,
    )


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`tracejudge ARGS` with `env`'s settings and none of the shell's."""
    from tests.realservices import ROOT

    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRACEJUDGE_")}
    return subprocess.run(
        [sys.executable, "-m", "tracejudge.streams.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=120,
    )
