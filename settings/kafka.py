"""The broker: where it is, how to reach it, and the topics the worker makes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    field_validator,
)

# Defaults of the judges' own settings are theirs: written there once, read here.


class KafkaSettings(BaseModel):
    """The broker: where it is, how to connect, the topics and the consumer group."""

    kafka_bootstrap: str = Field(
        "127.0.0.1:9092",
        description="Kafka bootstrap servers: host:port, several separated by commas.",
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT",
        description="How every Kafka client connects: PLAINTEXT, SSL, SASL_PLAINTEXT or "
        "SASL_SSL (TLS with SASL; what managed Kafka services require).",
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", description="SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."
    )
    kafka_sasl_username: str = Field("", description="SASL user name.")
    kafka_sasl_password: SecretStr = Field(
        SecretStr(""), description="SASL password (secret; never logged)."
    )
    kafka_ssl_cafile: str = Field(
        "", description="CA certificates (PEM) to trust; empty: the system's trust store."
    )
    kafka_ssl_certfile: str = Field(
        "", description="Client certificate (PEM) for mutual TLS; empty: none."
    )
    kafka_ssl_keyfile: str = Field("", description="Private key (PEM) of the client certificate.")
    topic_prefix: str = Field("tracejudge.", description="Prefix of every topic name.")
    partitions: int = Field(4, ge=1, description="Partitions of every topic the worker creates.")
    replication_factor: int | None = Field(
        None,
        ge=1,
        description="Replication factor of the topics the worker creates; not set: the "
        "cluster's broker count up to 3 (1 on a single broker). Set, it wins: the operator knows "
        "what the cluster will grow to or can spare. Topics with 3 or more replicas get "
        "min.insync.replicas 2, so a write acknowledged with acks=all survives a broker's loss.",
    )
    app_id: str = Field("tracejudge", description="Consumer group and changelog topic prefix.")
    kafka_max_request_bytes: int = Field(
        1_048_588,
        ge=1_000_000,
        description="Producer request size limit; the broker's message.max.bytes (Kafka's "
        "default here), so that any record the broker accepted can be dead-lettered whole.",
    )

    @field_validator("replication_factor", mode="before")
    @classmethod
    def _replication_unset(cls, value: Any) -> Any:
        # empty (as in an env file's `TRACEJUDGE_REPLICATION_FACTOR=`): chosen from the cluster
        if isinstance(value, str) and value.strip().lower() in ("", "unset", "none", "auto"):
            return None
        return value

    @field_validator("kafka_bootstrap")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        # Kafka's bootstrap.servers form; the port is required (as Java clients require it)
        # rather than defaulted: a bare host was reported as an unreachable broker
        for server in value.split(","):
            host, colon, port = server.strip().rpartition(":")
            bare_ipv6 = ":" in host and not (host.startswith("[") and host.endswith("]"))
            if (
                not colon
                or not host
                or bare_ipv6
                or not port.isdigit()
                or not 0 < int(port) < 65536
            ):
                raise ValueError(
                    f"{server.strip()!r} is not host:port (e.g. localhost:9092, [::1]:9092; "
                    "several separated by commas)"
                )
        return value
