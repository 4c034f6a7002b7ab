"""`tracejudge acls`: the Kafka ACLs of a deployment, printed as `kafka-acls.sh` commands or
JSON, or applied through the admin API under the connection's (an admin's) credentials."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING

from tracejudge.streams.cli import exits

if TYPE_CHECKING:  # the parser is built without the worker extra (streams/cli/entry.py)
    from tracejudge.settings import Settings


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--principal",
        action="append",
        default=[],
        metavar="ROLE=TYPE:NAME",
        help="the principal of a role (worker, agent, outcomes, explorer, operator); default "
        "User:tracejudge-ROLE; repeatable",
    )
    parser.add_argument(
        "--team",
        default=None,
        metavar="NAME",
        help="only the agent role, for one team's principal (default User:tracejudge-agent-NAME):"
        " of the reflection groups it may join only tracejudge-reflections.NAME.*",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="print {role: {principal, grants}}")
    mode.add_argument(
        "--apply",
        action="store_true",
        help="create them on the cluster, connected with TRACEJUDGE_KAFKA_* as a principal "
        "allowed to alter ACLs",
    )


def run_acls(settings: Settings, args: argparse.Namespace) -> int:
    from tracejudge.streams.kafka import acls

    team = getattr(args, "team", None)
    try:
        principals = acls.parse_principals(args.principal)
        if team is not None:
            grants = acls.team_grants(settings, team)
            if not any(p.startswith("agent=") for p in args.principal):
                principals["agent"] = f"User:tracejudge-agent-{team}"
        else:
            grants = acls.role_grants(settings)
    except ValueError as exc:
        print(f"tracejudge: {exc}", file=sys.stderr)
        return exits.USAGE_OR_CONFIGURATION
    if args.json:
        print(json.dumps(acls.as_json(grants, principals), indent=2))
        return 0
    if "kafka_bootstrap" not in settings.model_fields_set:
        # said, not assumed: the commands (or --apply) would name a broker nobody chose
        print(
            f"tracejudge: TRACEJUDGE_KAFKA_BOOTSTRAP is not set: using the default "
            f"{settings.kafka_bootstrap}",
            file=sys.stderr,
        )
    if not args.apply:
        print("\n".join(acls.admin_properties(settings)))
        print("\n".join(acls.kafka_acls_commands(grants, principals, settings.kafka_bootstrap)))
        return 0
    from tracejudge.streams.kafka.security import check_connection

    asyncio.run(check_connection(settings))  # one clear line for a broker away or refusing
    try:
        count = acls.apply(settings, principals, grants=grants)
    except acls.AclsRefused as exc:
        print(f"tracejudge: {exc}", file=sys.stderr)
        return exits.UNREACHABLE
    roles = ", ".join(f"{role} {principals[role]}" for role in grants)
    print(f"applied {count} ACLs: {roles}")
    return 0
