"""One connection set-up for every Kafka client: SASL_SSL always means TLS."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from tracejudge.models.errors import ConfigurationError
from tracejudge.settings import Settings
from tracejudge.streams.kafka.security import client_options
from tracejudge.streams.worker.app import _faust_credentials


def test_plaintext_needs_nothing_more() -> None:
    options = client_options(Settings(kafka_bootstrap="k:9092"))
    assert options == {"bootstrap_servers": "k:9092", "security_protocol": "PLAINTEXT"}
    assert _faust_credentials(Settings()) is None


def test_sasl_ssl_always_carries_a_tls_context_in_aiokafka_and_faust() -> None:
    settings = Settings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="u",
        kafka_sasl_password="p",  # type: ignore[arg-type]
    )
    options = client_options(settings)
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("u", "p")
    credentials = _faust_credentials(settings)
    # faust's SASLCredentials would fall back to SASL_PLAINTEXT without the context
    assert credentials.protocol.value == "SASL_SSL" and credentials.ssl_context is not None


def test_an_unreadable_ca_file_is_a_configuration_error_naming_the_setting(tmp_path: Path) -> None:
    settings = Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=str(tmp_path / "no.pem"))
    with pytest.raises(ConfigurationError, match="TRACEJUDGE_KAFKA_SSL_CAFILE"):
        client_options(settings)
