"""Kafka ACLs for a deployment: one principal per role, each allowed only its topics and groups.

Roles:
- `worker`: reads the inputs and its internal topics, writes the outputs (and the close markers it
  routes through the events topic), creates and tunes its own topics, joins its two groups;
- `agent`: what an agent's client and a reflection worker need: writes the input topics, reads
  its verdicts, interventions, reflection requests and retries (by assignment, no group joined;
  a reflection worker's group starts with `tracejudge-reflections-`, and joins only with the
  client's default group names);
- `receiver`: `tracejudge otel`: writes the events topic, reads nothing (it is reachable from
  every agent host, so it holds no more than it uses);
- `outcomes`: a source of ground truth: writes outcome events to the events topic, reads nothing
  (Kafka cannot tell an outcome from a step on one topic: TRACEJUDGE_OUTCOME_KEYS does that);
- `explorer`: reads the evaluations, alerts and reflections topics, writes nothing;
- `operator`: `tracejudge topics`, `status`, `tail`, `publish`, `replay --from-topic`: creates
  and describes every topic, reads the inputs and outputs (not the tables' changelogs nor the
  judge's queue), writes the input topics only, describes the worker's groups (their lag) and
  cannot commit their offsets.

Everything else is refused once the broker runs an authorizer with no ACL meaning deny
(`allow.everyone.if.no.acl.found=false`, Kafka's default): nobody but the worker writes the
control or evaluations topics. Applied with confluent-kafka's admin client (librdkafka, already
the client's transport), or printed as `kafka-acls.sh` commands for those who apply ACLs their
own way.
"""

from __future__ import annotations

import multiprocessing
import re
import shlex
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from tracejudge.models import names
from tracejudge.settings import Settings

ROLES = ("worker", "agent", "receiver", "outcomes", "explorer", "operator")
DEFAULT_PRINCIPALS = {role: f"User:tracejudge-{role}" for role in ROLES}
# the client's groups (client/): a reflection worker's default group, which it joins; and the
# groups librdkafka requires of the verdict and intervention readers, never joined, whose
# coordinator it still looks up (Describe)
REFLECTION_GROUP_PREFIX = "tracejudge-reflections-"
READER_GROUP_PREFIXES = ("tracejudge-client-", "tracejudge-interventions-")
# a team's agents (`--team NAME`): their reflection workers' groups start with
# `tracejudge-reflections.NAME.` (client/reflections.py, `team=`), which no other team's
# principal, nor the shared agent role, may join or commit
TEAM_GROUP_PREFIX = "tracejudge-reflections.{team}."
_TEAM = re.compile(r"[A-Za-z0-9_-]{1,48}")


def team_group_prefix(team: str) -> str:
    """The reflection groups a team's principal alone may join; a ValueError for a name that
    could be mistaken for another team's prefix (no dot: the dot ends the name)."""
    if not _TEAM.fullmatch(team):
        raise ValueError(f"--team {team!r}: 1-48 of A-Z a-z 0-9 _ -")
    return TEAM_GROUP_PREFIX.format(team=team)


@dataclass(frozen=True)
class Grant:
    """Operations allowed on one resource: `topic`, `group` or `cluster`; `literal` names one
    resource, `prefixed` every resource whose name starts with `name`."""

    resource: str
    name: str
    operations: tuple[str, ...]
    pattern: str = "literal"


def _topics(settings: Settings, suffixes: Iterable[str]) -> list[str]:
    return [settings.topic(s) for s in suffixes]


def faust_topics(settings: Settings) -> list[str]:
    """The worker's own topics beside the named ones: its tables' changelogs and the topic Faust's
    partition assignor elects its leader on."""
    changelogs = [names.changelog_topic(settings.app_id, t) for t in names.TABLES]
    return [*changelogs, f"{settings.app_id}-__assignor-__leader"]


def team_grants(settings: Settings, team: str) -> dict[str, list[Grant]]:
    """The agent role for one team's principal: the shared agent role's topics, and of the
    reflection groups only the team's own."""
    prefix = team_group_prefix(team)
    shared = role_grants(settings)["agent"]
    own = [g for g in shared if g.name != REFLECTION_GROUP_PREFIX]
    return {"agent": [*own, Grant("group", prefix, ("Read", "Describe"), "prefixed")]}


def role_grants(settings: Settings) -> dict[str, list[Grant]]:
    """Role -> what it may do, for these settings' topic prefix and application id."""
    inputs = _topics(settings, names.INPUTS)
    outputs = _topics(settings, names.OUTPUTS)
    internal = _topics(settings, names.INTERNAL)
    own = faust_topics(settings)
    everything = [*inputs, *outputs, *internal, *own]
    groups = [settings.app_id, settings.app_id + names.JUDGE_GROUP_SUFFIX]
    manage = ("Create", "Describe", "DescribeConfigs", "AlterConfigs")
    agent_reads = _topics(
        settings,
        (names.EVALUATIONS, names.CONTROL, names.REFLECTIONS, names.RETRIES, names.SESSIONS),
    )
    viewed = _topics(
        settings,
        (names.EVALUATIONS, names.ALERTS, names.REFLECTIONS, names.SESSIONS, names.MODES),
    )
    return {
        "worker": [
            *(Grant("topic", t, manage) for t in everything),
            *(Grant("topic", t, ("Read",)) for t in [*inputs, *internal, *own]),
            # the events topic too: idle-close and purge markers go through it
            *(Grant("topic", t, ("Write",)) for t in [inputs[0], *outputs, *internal, *own]),
            *(Grant("group", g, ("Read", "Describe")) for g in groups),
        ],
        "agent": [
            *(Grant("topic", t, ("Write", "Describe")) for t in inputs),
            *(Grant("topic", t, ("Read", "Describe")) for t in agent_reads),
            Grant("group", REFLECTION_GROUP_PREFIX, ("Read", "Describe"), "prefixed"),
            *(Grant("group", g, ("Describe",), "prefixed") for g in READER_GROUP_PREFIXES),
        ],
        "receiver": [Grant("topic", inputs[0], ("Write", "Describe"))],
        "outcomes": [Grant("topic", inputs[0], ("Write", "Describe"))],
        "explorer": [Grant("topic", t, ("Read", "Describe")) for t in viewed],
        "operator": [
            *(Grant("topic", t, manage) for t in everything),
            # what `tail`, `replay --from-topic` and `publish` read: not the tables' changelogs
            # (the open windows' steps) nor the judge's queue
            *(Grant("topic", t, ("Read",)) for t in [*inputs, *outputs]),
            *(Grant("topic", t, ("Write",)) for t in inputs),
            # `status` reads the groups' lag: Describe. Not Read, which would let an operator
            # commit the worker's offsets and skip events (the worker seeds its own)
            *(Grant("group", g, ("Describe",)) for g in groups),
        ],
    }


def parse_principals(pairs: Iterable[str]) -> dict[str, str]:
    """`role=User:name` pairs over the defaults; an unknown role or a principal without its type
    is a ValueError naming it."""
    principals = dict(DEFAULT_PRINCIPALS)
    for pair in pairs:
        role, sep, principal = pair.partition("=")
        if not sep or role not in ROLES:
            raise ValueError(f"--principal {pair!r}: expected ROLE=User:NAME, ROLE one of {ROLES}")
        if ":" not in principal or not principal.split(":", 1)[1]:
            raise ValueError(f"--principal {pair!r}: a principal is TYPE:NAME, e.g. User:{role}")
        principals[role] = principal
    return principals


def kafka_acls_commands(
    grants: Mapping[str, list[Grant]],
    principals: Mapping[str, str],
    bootstrap: str,
    command_config: str = "admin.properties",
) -> list[str]:
    """`kafka-acls.sh --add` lines as Kafka's own tool takes them: one per role and set of
    operations, naming every resource they apply to (`--topic` repeats)."""
    lines = []
    for role, role_grants_ in grants.items():
        lines.append(f"# {role}: {principals[role]}")
        merged: dict[tuple[str, tuple[str, ...], str], list[str]] = {}
        for grant in role_grants_:
            merged.setdefault((grant.resource, grant.operations, grant.pattern), []).append(
                grant.name
            )
        for (resource, operations, pattern), resources in merged.items():
            args = [
                "kafka-acls.sh",
                "--bootstrap-server",
                bootstrap,
                "--command-config",
                command_config,
                "--add",
                "--allow-principal",
                principals[role],
            ]
            for operation in operations:
                args += ["--operation", operation]
            for name in resources:
                args += [f"--{resource}", name]
            if pattern != "literal":
                args += ["--resource-pattern-type", pattern]
            lines.append(shlex.join(args))
    return lines


def as_json(grants: Mapping[str, list[Grant]], principals: Mapping[str, str]) -> dict[str, Any]:
    return {
        role: {
            "principal": principals[role],
            "grants": [
                {
                    "resource": g.resource,
                    "name": g.name,
                    "pattern": g.pattern,
                    "operations": list(g.operations),
                }
                for g in role_grants_
            ],
        }
        for role, role_grants_ in grants.items()
    }


def bindings(grants: Mapping[str, list[Grant]], principals: Mapping[str, str]) -> list[Any]:
    """confluent-kafka AclBindings: one per (grant, operation), allowed from any host."""
    # the admin package imports these without re-exporting them (so mypy would refuse them)
    from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
    from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

    found = []
    for role, role_grants_ in grants.items():
        for grant in role_grants_:
            for operation in grant.operations:
                found.append(
                    AclBinding(
                        ResourceType[grant.resource.upper()],
                        grant.name,
                        ResourcePatternType[grant.pattern.upper()],
                        principals[role],
                        "*",
                        AclOperation[_snake(operation).upper()],
                        AclPermissionType.ALLOW,
                    )
                )
    return found


def _snake(operation: str) -> str:
    """`DescribeConfigs` -> `describe_configs`: Kafka's tool's names to confluent-kafka's enum."""
    return "".join(
        f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(operation)
    )


def librdkafka_config(settings: Settings) -> dict[str, Any]:
    """The connection settings for confluent-kafka, from the same TRACEJUDGE_KAFKA_* ones."""
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap,
        "security.protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_security_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        config["sasl.mechanism"] = settings.kafka_sasl_mechanism
        config["sasl.username"] = settings.kafka_sasl_username
        config["sasl.password"] = settings.kafka_sasl_password.get_secret_value()
    for setting, name in (
        ("kafka_ssl_cafile", "ssl.ca.location"),
        ("kafka_ssl_certfile", "ssl.certificate.location"),
        ("kafka_ssl_keyfile", "ssl.key.location"),
    ):
        if getattr(settings, setting):
            config[name] = getattr(settings, setting)
    return config


def admin_properties(settings: Settings) -> list[str]:
    """What `admin.properties` (kafka-acls.sh's --command-config) holds for this deployment's
    connection, as comment lines: the admin principal's own credentials go in place of the
    placeholders (never this process's secrets)."""
    protocol = settings.kafka_security_protocol
    lines = [
        "# admin.properties: kafka-acls.sh's client settings, for a principal allowed to alter",
        f"# the cluster's ACLs; for this deployment (security.protocol {protocol}):",
        f"#   security.protocol={protocol}",
    ]
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        module = (
            "plain.PlainLoginModule"
            if settings.kafka_sasl_mechanism == "PLAIN"
            else "scram.ScramLoginModule"
        )
        lines += [
            f"#   sasl.mechanism={settings.kafka_sasl_mechanism}",
            f"#   sasl.jaas.config=org.apache.kafka.common.security.{module} required "
            'username="ADMIN" password="ADMIN-PASSWORD";',
        ]
    if protocol in ("SSL", "SASL_SSL"):
        cafile = settings.kafka_ssl_cafile or "/path/to/ca.pem"
        lines += ["#   ssl.truststore.type=PEM", f"#   ssl.truststore.location={cafile}"]
        if settings.kafka_ssl_certfile:
            lines += [
                "#   ssl.keystore.type=PEM",
                "#   ssl.keystore.location=/path/to/admin-cert-and-key.pem",
            ]
    if protocol == "PLAINTEXT":
        lines.append("#   (an empty file will do: PLAINTEXT has no credentials)")
    return lines


class AclsRefused(RuntimeError):
    """The cluster did not take the ACLs: its reason, in one line."""


def apply(
    settings: Settings,
    principals: Mapping[str, str],
    timeout_s: float = 30.0,
    grants: Mapping[str, list[Grant]] | None = None,
) -> int:
    """Create every binding of `grants` (default: every role's; creating one that exists is a
    no-op on the broker); returns how many. The connection's principal must be allowed to
    alter the cluster's ACLs.

    The request runs in a child process: a broker that answers CreateAcls with what librdkafka
    cannot parse (Tansu, the demo's broker, has no authorizer) makes librdkafka fail an
    assertion and abort its process, which must not be the command's. AclsRefused says what
    went wrong either way."""
    wanted = dict(role_grants(settings) if grants is None else grants)
    context = multiprocessing.get_context("spawn")  # no forked copy of a running client
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        future = pool.submit(
            _create, librdkafka_config(settings), wanted, dict(principals), timeout_s
        )
        try:
            count, refused = future.result(timeout=timeout_s + 60)
        except BrokenProcessPool:
            raise AclsRefused(
                f"the broker at {settings.kafka_bootstrap} answered the ACL request with what "
                "the Kafka client cannot read (it aborted): does it support ACLs, with an "
                "authorizer configured? (Tansu, the demo's broker, does not)"
            ) from None
    if refused is not None:
        raise AclsRefused(f"the cluster refused the ACLs: {refused}")
    return count


def _create(
    config: dict[str, Any],
    grants: Mapping[str, list[Grant]],
    principals: Mapping[str, str],
    timeout_s: float,
) -> tuple[int, str | None]:
    """In the child: (bindings created, None), or (0, the broker's reason). Its stderr goes
    nowhere: librdkafka's protocol lines and an assertion's message are not the operator's to
    read; the parent says what happened."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    wanted = bindings(grants, principals)
    admin = AdminClient(config)
    try:
        futures = admin.create_acls(wanted, request_timeout=timeout_s)
        for future in futures.values():
            future.result(timeout=timeout_s)  # raises KafkaException with the broker's reason
    except KafkaException as exc:
        return 0, str(exc.args[0])
    return len(wanted), None
