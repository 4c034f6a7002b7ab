"""The `tracejudge` command as a new user meets it, without Kafka: the bare command, a bootstrap
without a port, a port already taken, the settings line a start logs, a file's bad lines."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from tests.cli import clean_env, run_cli
from tracejudge.models.errors import DependencyUnreachable
from tracejudge.settings import Settings, SettingsError, changed_settings, load_settings
from tracejudge.streams.cli.publish import check_lines, line_ranges, report


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=clean_env(**env), timeout_s=60)


def test_the_bare_command_lists_every_command() -> None:
    done = run()
    assert done.returncode == 2  # a usage error, as argparse's own
    for command in ("worker", "publish", "tail", "status", "ui", "show", "schema"):
        assert f"    {command} " in done.stderr, done.stderr


@pytest.mark.parametrize("bootstrap", ["localhost", "kafka:port", "a:9092,b", "::1:9092", ""])
def test_a_bootstrap_without_a_port_is_a_configuration_error(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEJUDGE_KAFKA_BOOTSTRAP", bootstrap)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    (problem,) = caught.value.problems
    assert problem.startswith("TRACEJUDGE_KAFKA_BOOTSTRAP=") and "host:port" in problem


@pytest.mark.parametrize("bootstrap", ["localhost:9092", "k1:9092, k2:9093", "[::1]:9092"])
def test_host_and_port_forms_are_accepted(bootstrap: str) -> None:
    assert Settings(kafka_bootstrap=bootstrap).kafka_bootstrap == bootstrap


def test_the_command_names_the_bootstrap_setting_not_an_unreachable_broker() -> None:
    done = run("tail", "evaluations", TRACEJUDGE_KAFKA_BOOTSTRAP="localhost")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "TRACEJUDGE_KAFKA_BOOTSTRAP" in done.stderr and "host:port" in done.stderr
    assert "unreachable" not in done.stderr and "cannot reach" not in done.stderr


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "setting", "env_name"),
    [
        (["ui", "--port", "{port}"], "--port or TRACEJUDGE_UI_PORT", None),
        (["ui"], "TRACEJUDGE_UI_PORT", "TRACEJUDGE_UI_PORT"),
        (["worker"], "TRACEJUDGE_WEB_PORT", "TRACEJUDGE_WEB_PORT"),
        (["judge"], "TRACEJUDGE_WEB_PORT", "TRACEJUDGE_WEB_PORT"),
    ],
)
def test_a_taken_port_is_one_line_naming_it_and_its_setting(
    taken_port: int, args: list[str], setting: str, env_name: str | None
) -> None:
    env = {env_name: str(taken_port)} if env_name else {}
    # nothing listens on this broker port: the port check must come before any connection
    env |= {"TRACEJUDGE_KAFKA_BOOTSTRAP": "127.0.0.1:9", "TRACEJUDGE_LLM_BASE_URL": "http://x/v1"}
    done = run(*(a.format(port=taken_port) for a in args), **env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"127.0.0.1:{taken_port}" in done.stderr and "in use" in done.stderr
    assert setting in done.stderr


def test_the_start_logs_only_changed_settings_masked(caplog: pytest.LogCaptureFixture) -> None:
    from tracejudge.streams.judge.service import run_judge

    settings = Settings(
        kafka_bootstrap="127.0.0.1:9",
        kafka_sasl_password=SecretStr("hunter2-kafka"),
        llm_api_key=SecretStr("sk-live-abcdefghijklmnopqrstuvwxyz0123456789"),
        redis_url="redis://user:s3cr3t-redis@127.0.0.1:9/0",
        llm_judge_enabled=True,
        stop_timeout_s=1,
    )
    caplog.set_level(logging.INFO)
    with pytest.raises(DependencyUnreachable):  # nothing listens on port 9: logs, then fails
        run_judge(settings)
    first = caplog.records[0].getMessage()
    assert first.startswith("settings other than the defaults: ")
    assert len(first) < 600, first
    assert "kafka_bootstrap='127.0.0.1:9'" in first and "redis_url=" in first
    for secret in ("hunter2-kafka", "sk-live-abcdefghij", "s3cr3t-redis"):
        assert secret not in first
    assert "log_format" not in first  # a default is not repeated


def test_changed_settings_without_changes_is_short(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("TRACEJUDGE_")]:
        monkeypatch.delenv(name)
    # at most what validators derive (the LLM judge on or off, from the endpoint's presence)
    assert len(changed_settings(Settings())) < 60


LINES = [
    json.dumps({"type": "task_started", "request_id": "r1", "goal": "g"}),
    "{not json",
    '{"type": "tool_call", "request_id": "r1", "step_index": 1, "to',
    json.dumps({"type": "final_response", "request_id": "r1", "text": "the answer"}),
    json.dumps({"type": "tool_cal", "request_id": "r1", "step_index": 1}),
    "",
    json.dumps({"type": "final_response", "request_id": "r1", "output": "ok", "mood": "good"}),
]


def test_each_bad_line_is_named_with_its_reason() -> None:
    checked = check_lines([line.encode() for line in LINES])
    assert checked.good_numbers == [1, 7] and checked.blank == 1
    reasons = {p.line: p.reason for p in checked.bad}
    assert sorted(reasons) == [2, 3, 4, 5]
    assert reasons[2].startswith("not_json") and reasons[3].startswith("not_json")
    assert "output: Field required" in reasons[4] and "unknown field: text" in reasons[4]
    assert reasons[5].startswith("unknown_type")
    # a valid event's unknown field is named, not refused: the worker ignores it
    (warning,) = checked.warnings
    assert warning.line == 7 and "mood" in warning.reason


def test_a_line_over_the_size_limit_is_bad() -> None:
    big = json.dumps({"type": "task_started", "request_id": "r", "goal": "x" * 5000}).encode()
    (problem,) = check_lines([big], max_bytes=1024).bad
    assert problem.reason.startswith("too_large")


def test_the_report_is_capped_and_every_skipped_line_named() -> None:
    checked = check_lines([b"{"] * 30)
    lines = report(checked.bad, limit=20)
    assert len(lines) == 21 and lines[-1] == "tracejudge: ... and 10 more"
    assert all(line.count("\n") == 0 for line in lines)
    assert line_ranges([p.line for p in checked.bad]) == "1-30"
    assert line_ranges([9, 2, 3, 4, 7]) == "2-4, 7, 9"
