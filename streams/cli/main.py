"""`tracejudge` command line: worker, judge, topics, acls, demo, status, show, ui, tail, publish,
replay, agreement, schema."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from tracejudge.models import names
from tracejudge.models.errors import ConfigurationError, DependencyUnreachable
from tracejudge.models.version import PACKAGE_VERSION
from tracejudge.streams.cli import exits
from tracejudge.streams.cli.acls import configure as configure_acls
from tracejudge.streams.cli.acls import run_acls
from tracejudge.streams.cli.entry import WORKER_EXTRA
from tracejudge.streams.shared.visible import exact_json, visible, visible_data

# The parser (--help, --version, usage errors) needs nothing of the worker extra: the settings
# and logging modules, which do, are imported once a command runs, so that the client-only
# install (`pip install tracejudge`) gets help and a one-line "install the extra", not a
# traceback (streams/cli/entry.py).
if TYPE_CHECKING:
    from tracejudge.settings import Settings
    from tracejudge.streams.kafka.io import PublishReport

TAIL_KINDS = (
    names.EVALUATIONS,
    names.ALERTS,
    names.REFLECTIONS,
    names.RETRIES,
    names.CONTROL,
    names.DLQ,
    names.SESSIONS,
    names.MODES,
)


KAFKA_COMMANDS = ("publish", "tail", "status", "otel", "show", "ui")
TOPIC_POLL_S = 2.0  # `tail --wait`: how often the topic's existence is asked


def _names(*fields: str) -> list[str]:
    return [f"TRACEJUDGE_{f.upper()}" for f in fields]


def _group(group: type[BaseModel]) -> list[str]:
    return _names(*group.model_fields)


OUTPUT_SETTINGS = ("log_level", "log_format")


@functools.cache  # one table for the parser, not one per command's epilog
def command_settings() -> dict[str, list[str]]:
    """The settings each command reads (the worker reads them all)."""
    from tracejudge.settings import Settings
    from tracejudge.settings.judge import JudgeSettings
    from tracejudge.settings.kafka import KafkaSettings
    from tracejudge.settings.redis import RedisSettings
    from tracejudge.settings.rules import RuleSettings

    return {
        "worker": _names(*Settings.model_fields),
        "judge": _group(KafkaSettings)
        + _group(RedisSettings)
        + _group(JudgeSettings)
        + _names("web_host", "web_port", "stop_timeout_s", *OUTPUT_SETTINGS),
        "topics": _group(KafkaSettings),
        "acls": _group(KafkaSettings) + _names("topic_prefix", "app_id"),
        "otel": _group(KafkaSettings)
        + _names(*(f for f in Settings.model_fields if f.startswith("otel_")), *OUTPUT_SETTINGS),
        "demo": _names("kafka_bootstrap", "redis_url") + _group(JudgeSettings),
        "show": _group(KafkaSettings) + _names("redis_url"),
        "ui": _group(KafkaSettings)
        + _names("redis_url", *(f for f in Settings.model_fields if f.startswith("ui_"))),
        "tail": _group(KafkaSettings),
        "status": _group(KafkaSettings) + _names("status_workers", "web_port", "redis_url"),
        "replay": _group(RuleSettings) + _group(JudgeSettings) + _group(KafkaSettings),
        # Redis only as the judge's cache, as in a replay
        "agreement": _group(RuleSettings) + _group(JudgeSettings) + _names("redis_url"),
        "publish": _group(KafkaSettings) + _names("max_event_bytes"),
        "schema": [],
        "keys": [],
    }


def _epilog(command: str) -> str:
    lines = []
    try:
        names = command_settings()[command]
    except ModuleNotFoundError:  # the client-only install: no settings to list, and no command
        names = []
        lines.append(f"needs the worker's dependencies: {WORKER_EXTRA}")
    if names:
        lines.append("settings (environment, or KEY=VALUE lines in --config FILE):")
        lines += textwrap.wrap(", ".join(names), 96, initial_indent="  ", subsequent_indent="  ")
        lines.append("  what each means: docs/configuration.md")
    lines.append(exits.HELP)
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tracejudge",
        description="Online evaluator of AI-agent executions on Kafka.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="`tracejudge COMMAND --help` lists the settings that matter to a command; every "
        "setting: docs/configuration.md\n" + exits.HELP,
    )
    parser.add_argument("--config", metavar="FILE", help="settings file (dotenv syntax)")
    parser.add_argument("--version", action="version", version=f"tracejudge {PACKAGE_VERSION}")
    # --config after the command too (`tracejudge worker --config prod.env`)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", metavar="FILE", default=argparse.SUPPRESS, help="settings file (dotenv syntax)"
    )
    # not `required=True`: argparse would then print only "the following arguments are
    # required: COMMAND", and a newcomer typing `tracejudge` wants the list of commands
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, text: str, config: bool = True) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=text,
            description=text,
            epilog=_epilog(name),
            parents=[common] if config else [],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    command("worker", "run the evaluation worker (one per core; more join its group)")
    judge = command(
        "judge",
        "run the LLM judge stage on its own (workers then set TRACEJUDGE_WORKER_JUDGES=false)",
    )
    judge.add_argument(
        "--print-prompt",
        action="store_true",
        help="print what the judge is given for an agent's runs (its system message with the "
        "team's criteria, and the answer schema with the team's dimensions), and exit",
    )
    judge.add_argument(
        "--agent", metavar="NAME", help="with --print-prompt: the agent (default: [default])"
    )
    command("topics", "create every topic (the worker also does it at start)")
    configure_acls(
        command(
            "acls",
            "the Kafka ACLs of each role (worker, agents, outcome sources, explorer, operators): "
            "print them as kafka-acls.sh commands, or --apply them",
        )
    )
    command("otel", "receive OTLP traces (gRPC :4317, HTTP :4318) as contract events")
    demo = command("demo", "run the demo on an embedded broker and print verdicts")
    demo.add_argument(
        "--timeout", type=float, default=180.0, metavar="SECONDS", help="give up after SECONDS"
    )
    demo.add_argument(
        "--serve",
        action="store_true",
        help="after the verdicts, keep the broker and worker up for examples/ until Ctrl-C",
    )
    show = command("show", "a request's evaluation, findings and step timeline")
    show.add_argument("request_id", metavar="REQUEST_ID")
    show.add_argument("--json", action="store_true", help="print {evaluation, timeline} as JSON")
    ui = command("ui", "the verdict explorer: recent verdicts, requests, agents, in a browser")
    ui.add_argument("--host", metavar="ADDRESS", help="listen here (TRACEJUDGE_UI_HOST)")
    ui.add_argument("--port", type=int, metavar="PORT", help="listen here (TRACEJUDGE_UI_PORT)")
    _readers(command)
    _offline(command)
    return parser


Command = Callable[..., argparse.ArgumentParser]


def _readers(command: Command) -> None:
    """The commands that read or write the cluster's topics for a person."""
    tail = command("tail", "print an output topic, one line per event")
    tail.add_argument("kind", choices=TAIL_KINDS, metavar="KIND", help=", ".join(TAIL_KINDS))
    tail.add_argument("--json", action="store_true", help="print the raw JSON values")
    tail.add_argument("--from-beginning", action="store_true", help="start at the oldest event")
    tail.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N events")
    tail.add_argument(
        "--wait",
        action="store_true",
        help="if the topic does not exist yet, wait for it (default: say so and exit 1)",
    )
    tail.add_argument(
        "--idle-exit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after SECONDS without an event (default: follow until Ctrl-C)",
    )
    status = command(
        "status", "configuration, topics with last-minute counts and lag, workers' health"
    )
    status.add_argument(
        "--worker",
        action="append",
        default=None,
        metavar="URL",
        help="a worker's base URL, e.g. http://10.0.0.5:6066 (repeatable)",
    )
    status.add_argument("--json", action="store_true", help="print JSON")
    publish = command("publish", "send contract events from a JSONL file ('-': stdin)")
    publish.add_argument("file", metavar="FILE")
    publish.add_argument("--topic", default=None, help="topic (default: <prefix>events)")
    publish.add_argument(
        "--skip-invalid",
        action="store_true",
        help="send the lines that are valid events and name the others (default: any invalid "
        "line and nothing is sent, exit 1)",
    )


def _offline(command: Command) -> None:
    """The commands that work on files, not on the cluster."""
    # replay's own --config is settings A (and --against settings B)
    replay = command(
        "replay",
        "re-evaluate recorded events offline with the worker's code; compare two settings",
        config=False,
    )
    replay.add_argument(
        "file", nargs="?", metavar="FILE", help="recorded events, JSONL (as `publish` reads)"
    )
    replay.add_argument("--config", dest="replay_config", metavar="A.env", help="settings A")
    replay.add_argument("--against", metavar="B.env", help="settings B: compare B with A")
    replay.add_argument("--labels", metavar="FILE", help="JSON: request_id -> ok/reward label")
    replay.add_argument("--out", type=Path, metavar="DIR", help="write evaluations and report")
    replay.add_argument(
        "--from-topic", action="store_true", help="read the cluster's events topic instead"
    )
    replay.add_argument(
        "--since", default="1h", metavar="DURATION", help="with --from-topic: 30m, 2h, 1d (1h)"
    )
    agreement = command(
        "agreement",
        "how right the verdicts are for labelled runs, per agent and verdict source: events "
        "re-evaluated offline under the settings (EVENTS), or the verdicts the worker published "
        "(--evaluations), joined to their labels as outcomes are live",
    )
    agreement.add_argument(
        "events",
        nargs="?",
        metavar="EVENTS",
        help="recorded events, JSONL (outcome events in it count), re-evaluated here",
    )
    agreement.add_argument(
        "--evaluations",
        metavar="FILE",
        help="instead of EVENTS: evaluations as published, JSONL (`tracejudge tail evaluations "
        "--json --from-beginning --idle-exit 10`); the last final one of each request counts, "
        "the figures are the live worker's and no setting plays a part",
    )
    agreement.add_argument(
        "--labels",
        required=True,
        metavar="FILE",
        help="JSON {request_id: label} or JSONL rows {request_id, ok|reward|success|score, "
        "source?}; a label: true/false, a 0-1 reward, or such an object",
    )
    agreement.add_argument("--json", action="store_true", help="print one JSON document")
    schema = command("schema", "print or write the JSON Schemas of the contract")
    schema.add_argument("--out", type=Path, default=None, help="write one file per schema here")
    keys = command(
        "keys",
        "a new Ed25519 pair of control keys: the worker's, the agents'",
    )
    keys.add_argument(
        "--hmac",
        action="store_true",
        help="a shared HMAC key instead (the same on the worker and the agents)",
    )
    keys.add_argument(
        "--id", default="control-1", help="the key id records name (default: %(default)s)"
    )
    keys.add_argument(
        "--not-after",
        default=None,
        metavar="YYYY-MM-DD",
        help="the agents refuse it after this day",
    )


def _keys(kid: str, not_after: str | None, shared: bool = False) -> int:
    from tracejudge.models.signing import ControlKeyError, ControlKeys, new_key_pair, new_mac_key

    try:
        if shared:
            private = public = new_mac_key(kid)
        else:
            private, public = new_key_pair(kid)
        if not_after:
            public += f"@{not_after}"
        ControlKeys.parse(public)  # a date it cannot read: the same error as at start
    except ControlKeyError as exc:
        print(f"tracejudge: {exc}", file=sys.stderr)
        return exits.USAGE_OR_CONFIGURATION
    if shared:
        print(
            "# the worker and every agent's client (secret: any holder can sign control)\n"
            f"TRACEJUDGE_CONTROL_KEYS={public}"
        )
        return 0
    print(f"# the worker (secret: never on an agent host)\nTRACEJUDGE_CONTROL_KEYS={private}")
    print(f"# every agent's client (public)\nTRACEJUDGE_CONTROL_KEYS={public}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a usage error (exit 2), with the whole help on stderr
        parser.print_help(sys.stderr)
        return exits.USAGE_OR_CONFIGURATION
    settings = _settings(args.config)
    if settings is None:
        return exits.USAGE_OR_CONFIGURATION
    if args.command == "judge" and args.print_prompt:  # files only: no port, no broker
        return _print_prompt(settings, args.agent)
    try:
        if args.command == "ui":  # its options, and its exposure, before any connection
            settings = _ui_settings(settings, args)
        taken = _taken_port(settings, args.command)
        if taken is not None:  # before Kafka is reached: one line, not a server's traceback
            print(f"tracejudge: {taken}", file=sys.stderr)
            return exits.USAGE_OR_CONFIGURATION
        if args.command == "publish":  # the file is checked before the broker is
            return _publish(settings, args.file, args.topic, args.skip_invalid)
        if args.command in KAFKA_COMMANDS or getattr(args, "from_topic", False):
            # one clear line for an unreachable, untrusted or credential-refusing broker
            from tracejudge.streams.kafka.security import check_connection

            asyncio.run(check_connection(settings))
        if args.command == "worker":
            return _worker(settings)
        if args.command == "judge":
            from tracejudge.streams.judge.service import run_judge

            return run_judge(settings)
        if args.command == "otel":
            from tracejudge.streams.receiver.receiver import serve
            from tracejudge.streams.shared.logs import quiet_library_logs

            quiet_library_logs()  # aiokafka logs every retry while the broker is away
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(serve(settings))
            return 0
        if args.command == "acls":
            return run_acls(settings, args)
        if args.command == "topics":
            return _topics(settings)
        if args.command == "demo":
            from tracejudge.streams.demo.run import run_demo

            return run_demo(settings, timeout_s=args.timeout, serve=args.serve)
        if args.command == "show":
            return _show(settings, args.request_id, args.json)
        if args.command == "ui":
            from tracejudge.streams.explorer.server import serve as serve_ui

            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(serve_ui(settings))
            return 0
        if args.command == "tail":
            with contextlib.suppress(KeyboardInterrupt):
                return asyncio.run(_tail(settings, args))
            return 0
        if args.command == "replay":
            from tracejudge.streams.cli.replay import run_replay

            return run_replay(settings, args)
        if args.command == "agreement":
            from tracejudge.streams.cli.agreement import run_agreement

            return run_agreement(settings, args)
        if args.command == "status":
            return _status(settings, args.worker, args.json)
        if args.command == "schema":
            return _schema(args.out)
        if args.command == "keys":
            return _keys(args.id, args.not_after, args.hmac)
    except DependencyUnreachable as exc:
        print(f"tracejudge: {exc}", file=sys.stderr)
        return exits.UNREACHABLE
    except ConfigurationError as exc:
        print(f"tracejudge: {exc}", file=sys.stderr)
        return exits.USAGE_OR_CONFIGURATION
    return exits.USAGE_OR_CONFIGURATION


def _print_prompt(settings: Settings, agent: str | None) -> int:
    """The judge's prompt for an agent's runs, as the judge stage builds it: no model is asked,
    nothing is read from Kafka."""
    from tracejudge.judges.llm.criteria import with_criteria
    from tracejudge.prompts import final_judge_prompt

    criteria = settings.criteria_book().for_agent(agent)
    prompt = with_criteria(final_judge_prompt(), criteria)
    source = settings.llm_criteria_file or "(no TRACEJUDGE_LLM_CRITERIA_FILE)"
    chosen = "none" if criteria is None else f"version {criteria.version}"
    print(f"# the judge's prompt for agent {agent or '(any: [default])'}")
    print(f"# prompt version {prompt.version}; the team's criteria from {source}: {chosen}")
    if criteria is not None and criteria.thresholds:
        floors = ", ".join(f"{name} below {floor}" for name, floor in criteria.thresholds)
        print(f"# low_dimension alerts: {floors}")
    print("\n## system message\n")
    print(prompt.system.rstrip())
    print("\n## answer schema\n")
    print(json.dumps(prompt.schema, indent=2))
    fits = settings.llm_input_tokens
    print(
        "\n## user message\n\nthe run between <data> and </data>, as JSON (the goal, the "
        f"steps, the final answer), within {fits} tokens (TRACEJUDGE_LLM_CONTEXT_TOKENS "
        f"{settings.llm_context_tokens}, less the system message and the answer)"
    )
    return exits.OK


def _topics(settings: Settings) -> int:
    from tracejudge.streams.kafka.admin import ensure_topics

    created = asyncio.run(ensure_topics(settings))
    print(f"created {len(created)} topics: {', '.join(created) or '(all existed)'}")
    return 0


def _settings(config: str | None) -> Settings | None:
    """The settings, logging set up by them; None once each problem is a line on stderr."""
    from tracejudge.streams.cli.configured import loaded
    from tracejudge.streams.shared.logs import setup_logging

    settings = loaded(config)
    if settings is None:
        return None
    setup_logging(settings.log_level, settings.log_format)
    return settings


def _ui_settings(settings: Settings, args: argparse.Namespace) -> Settings:
    from tracejudge.streams.explorer.server import check_exposure

    given = {"ui_host": args.host, "ui_port": args.port}
    chosen = settings.model_copy(update={k: v for k, v in given.items() if v is not None})
    check_exposure(chosen)
    return chosen


def _taken_port(settings: Settings, command: str) -> str | None:
    """The first port the command would listen on that it cannot, as one line."""
    from tracejudge.streams.cli.ports import Listener, try_listen

    web = Listener(settings.web_host, settings.web_port, "TRACEJUDGE_WEB_PORT")
    listeners = {
        "worker": [web],
        "judge": [web],
        "ui": [Listener(settings.ui_host, settings.ui_port, "TRACEJUDGE_UI_PORT", "--port")],
        "otel": [
            Listener(settings.otel_host, settings.otel_grpc_port, "TRACEJUDGE_OTEL_GRPC_PORT"),
            Listener(settings.otel_host, settings.otel_http_port, "TRACEJUDGE_OTEL_HTTP_PORT"),
        ],
    }
    for listener in listeners.get(command, []):
        problem = try_listen(listener)
        if problem is not None:
            return problem
    return None


def _show(settings: Settings, request_id: str, as_json: bool) -> int:
    from tracejudge.streams.explorer.show import fetch, render

    found = asyncio.run(fetch(settings, request_id))
    if found.evaluation is None:
        print(f"tracejudge: no evaluation of {request_id} found", file=sys.stderr)
        return exits.FAILED
    if as_json:
        shown = {"evaluation": found.evaluation, "timeline": found.timeline}
        print(json.dumps({**shown, "no_timeline": found.no_timeline}, indent=2))
    else:
        # trace text (ids, names, answers, errors) shown, never obeyed by the terminal
        evaluation, timeline = visible_data(found.evaluation), visible_data(found.timeline)
        sys.stdout.write(render(evaluation, timeline, found.no_timeline))
    return 0


def _worker(settings: Settings) -> int:
    from tracejudge.streams.worker.run import run_worker

    return run_worker(settings)


async def _topic_exists(settings: Settings, topic: str) -> bool:
    from tracejudge.streams.kafka.admin import partition_counts

    return topic in await partition_counts(settings)


def _no_topic(settings: Settings, topic: str) -> str:
    return (
        f"topic {topic} does not exist at {settings.kafka_bootstrap} (a worker creates the "
        "topics at start, `tracejudge topics` without one; is TRACEJUDGE_TOPIC_PREFIX right?)"
    )


async def _tail(settings: Settings, args: argparse.Namespace) -> int:
    from tracejudge.streams.cli.render import render
    from tracejudge.streams.kafka.io import read_topic

    topic = settings.topic(args.kind)
    where = f"{topic} at {settings.kafka_bootstrap}"
    if not await _topic_exists(settings, topic):
        if not args.wait:
            print(f"tracejudge: {_no_topic(settings, topic)}; --wait waits for it", file=sys.stderr)
            return exits.FAILED
        print(f"tracejudge: waiting for topic {where} to exist; Ctrl-C to stop", file=sys.stderr)
        # bounded by --idle-exit when given; otherwise until the topic exists or Ctrl-C
        started = time.monotonic()
        while not await _topic_exists(settings, topic):
            if args.idle_exit is not None and time.monotonic() - started > args.idle_exit:
                return exits.FAILED
            await asyncio.sleep(TOPIC_POLL_S)
    # on stderr: the hint never mixes with the events a script reads from stdout
    what = "every event from the oldest" if args.from_beginning else f"new {args.kind}"
    print(f"tracejudge: printing {what} on {where}; Ctrl-C to stop", file=sys.stderr, flush=True)
    count = 0
    async for record in read_topic(
        settings,
        topic,
        from_beginning=args.from_beginning,
        idle_timeout_s=args.idle_exit,
    ):
        headers = {k: v for k, v in (record.headers or ())}
        if args.json:
            line = (record.value or b"").decode("utf-8", "replace")
            if args.kind == names.DLQ:
                line = json.dumps(
                    {
                        "headers": {k: v.decode("utf-8", "replace") for k, v in headers.items()},
                        "value": line,
                    },
                    ensure_ascii=False,
                )
            line = exact_json(line)  # JSON still, with nothing a terminal would obey
        else:
            line = visible(render(args.kind, record.value, headers, record.key))
        print(line, flush=True)
        count += 1
        if args.limit is not None and count >= args.limit:
            break
    return 0


def _status(settings: Settings, workers: list[str] | None, as_json: bool) -> int:
    from tracejudge.streams.kafka.status import collect_status, render_status

    urls = workers or [u.strip() for u in settings.status_workers.split(",") if u.strip()]
    urls = urls or [f"http://127.0.0.1:{settings.web_port}"]
    from aiokafka.errors import KafkaError

    try:
        status = asyncio.run(collect_status(settings, urls))
    except (TimeoutError, OSError, KafkaError) as exc:
        print(f"tracejudge: broker {settings.kafka_bootstrap} unreachable: {exc}", file=sys.stderr)
        return 1
    print(status.to_json() if as_json else render_status(status))
    return exits.OK if all(w.code == 200 for w in status.workers) else exits.NOT_READY


def _publish(settings: Settings, file: str, topic: str | None, skip_invalid: bool) -> int:
    from tracejudge.streams.cli.publish import check_lines, line_ranges, report

    target = topic or settings.topic(names.EVENTS)
    if file == "-":
        lines = sys.stdin.buffer.readlines()
    else:
        try:
            lines = Path(file).read_bytes().splitlines()
        except OSError as exc:
            print(f"tracejudge: cannot read {file}: {exc.strerror}", file=sys.stderr)
            return exits.FAILED
    checked = check_lines(lines, settings.max_event_bytes)
    for text in report(sorted(checked.warnings + checked.bad, key=lambda p: p.line)):
        print(text, file=sys.stderr)
    if checked.bad and not skip_invalid:
        print(
            f"tracejudge: {len(checked.bad)} of {len(checked.bad) + len(checked.good)} lines "
            "are not valid events: nothing sent (--skip-invalid sends the valid ones)",
            file=sys.stderr,
        )
        return exits.FAILED
    sent = asyncio.run(_send(settings, target, checked.good))
    if sent is None:
        print(f"tracejudge: {_no_topic(settings, target)}", file=sys.stderr)
        return exits.FAILED
    print(f"sent {sent.sent} events to {sent.topic} ({checked.blank} blank lines skipped)")
    if checked.bad:
        numbers = [p.line for p in checked.bad]
        print(
            f"tracejudge: skipped {len(numbers)} invalid lines: {line_ranges(numbers)}",
            file=sys.stderr,
        )
    return exits.OK


async def _send(settings: Settings, topic: str, lines: list[bytes]) -> PublishReport | None:
    """The lines sent, once the broker answers; None when the topic does not exist (else
    aiokafka logs an error line ten times a second for a minute, then a traceback)."""
    from tracejudge.streams.kafka.io import publish_lines
    from tracejudge.streams.kafka.security import check_connection

    await check_connection(settings)
    if not await _topic_exists(settings, topic):
        return None
    return await publish_lines(settings, topic, lines)


def _schema(out: Path | None) -> int:
    from tracejudge.models.json_schemas import contract_schemas, write_schemas

    if out is None:
        print(json.dumps(contract_schemas(), indent=2, ensure_ascii=False))
        return 0
    for path in write_schemas(out):
        print(path)
    return 0
