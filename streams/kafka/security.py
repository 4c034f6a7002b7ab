"""One way to connect to Kafka, used by every client: the worker (Faust), its judge consumer,
watchdog and offset guard, the admin, the CLI, the demo and the agents' client.

SASL_SSL means TLS everywhere: Faust's SASLCredentials falls back to SASL_PLAINTEXT when it is
given no SSL context, so one is always built (the system's trust store unless a CA file is
set). A CA or key file that cannot be read is a ConfigurationError naming the setting.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from tracejudge.models.errors import ConfigurationError, DependencyUnreachable
from tracejudge.settings import Settings

TLS = ("SSL", "SASL_SSL")
SASL = ("SASL_PLAINTEXT", "SASL_SSL")


def ssl_context(settings: Settings) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=settings.kafka_ssl_cafile or None)
        if settings.kafka_ssl_certfile:
            context.load_cert_chain(settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(
            f"cannot read TRACEJUDGE_KAFKA_SSL_CAFILE / _SSL_CERTFILE / _SSL_KEYFILE ({exc})"
        ) from None
    return context


def client_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for any aiokafka client (consumer, producer, admin)."""
    protocol = settings.kafka_security_protocol
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap,
        "security_protocol": protocol,
    }
    if protocol in TLS:
        options["ssl_context"] = ssl_context(settings)
    if protocol in SASL:
        options.update(
            sasl_mechanism=settings.kafka_sasl_mechanism,
            sasl_plain_username=settings.kafka_sasl_username,
            sasl_plain_password=settings.kafka_sasl_password.get_secret_value(),
        )
    return options


async def check_connection(settings: Settings, timeout_s: float = 10.0) -> None:
    """Connect to the first reachable bootstrap server the way every client will, and turn a
    failure into one ConfigurationError line that says what is wrong: nothing listening,
    an untrusted certificate, refused credentials."""
    from aiokafka.conn import create_conn
    from aiokafka.errors import KafkaError

    options = client_options(settings)
    options.pop("bootstrap_servers")
    last = "no bootstrap server"
    for server in [s.strip() for s in settings.kafka_bootstrap.split(",") if s.strip()]:
        host, _, port = server.rpartition(":")
        try:
            conn = await asyncio.wait_for(
                create_conn(host or server, int(port or 9092), **options), timeout_s
            )
        except ssl.SSLCertVerificationError as exc:
            raise ConfigurationError(
                f"Kafka at {server} presented a certificate that is not trusted "
                f"({exc.verify_message}): set TRACEJUDGE_KAFKA_SSL_CAFILE to its CA"
            ) from None
        except ssl.SSLError as exc:
            raise ConfigurationError(
                f"TLS with Kafka at {server} failed ({exc.reason or exc}): is "
                "TRACEJUDGE_KAFKA_SECURITY_PROTOCOL right for this listener?"
            ) from None
        except KafkaError as exc:
            if "Authentication" in type(exc).__name__ or "authentication" in str(exc):
                raise ConfigurationError(
                    f"Kafka at {server} refused the credentials of "
                    f"{settings.kafka_sasl_username or '(no user)'} "
                    f"({settings.kafka_sasl_mechanism}): check TRACEJUDGE_KAFKA_SASL_USERNAME "
                    "and TRACEJUDGE_KAFKA_SASL_PASSWORD"
                ) from None
            last = f"{server}: {exc}"
            continue
        except (OSError, TimeoutError, ValueError) as exc:
            last = f"{server}: {exc or type(exc).__name__}"
            continue
        conn.close()
        return
    raise DependencyUnreachable(
        f"cannot reach Kafka at {settings.kafka_bootstrap} ({last}); start a broker or set "
        "TRACEJUDGE_KAFKA_BOOTSTRAP (a connection closed at once: does "
        f"TRACEJUDGE_KAFKA_SECURITY_PROTOCOL={settings.kafka_security_protocol} match the "
        "listener?)"
    )
