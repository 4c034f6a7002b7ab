"""Settings: seed 001's keys, and configuration mistakes named in one line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.memory import memory_worker
from tracejudge.settings import SettingsError, load_settings
from tracejudge.streams.worker.app import _faust_app


def test_a_misspelled_variable_is_named_with_the_closest_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACEJUDGE_WARN_TRESHOLD", "70")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert caught.value.problems == [
        "unknown setting TRACEJUDGE_WARN_TRESHOLD (did you mean TRACEJUDGE_WARN_THRESHOLD?)"
    ]


def test_the_scripts_cache_variable_is_not_a_setting_and_not_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACEJUDGE_CACHE", "/tmp/cache")
    assert load_settings().mode == "online"


def test_an_unknown_key_in_the_config_file_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "a.env"
    config.write_text("TRACEJUDGE_PARTITIONS=8\nTRACEJUDGE_IDLE_TIMEOUT=30\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(str(config))
    [problem] = caught.value.problems
    assert problem.startswith(f"{config}: unknown setting TRACEJUDGE_IDLE_TIMEOUT")
    assert "TRACEJUDGE_IDLE_TIMEOUT_S" in problem


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("TRACEJUDGE_PARTITIONS", "zero", "valid integer"),
        ("TRACEJUDGE_MODE", "batch", "'online'"),
        ("TRACEJUDGE_TABLE_STORE", "disk", "'rocksdb' or 'memory'"),
        ("TRACEJUDGE_ENABLED", "maybe", "valid boolean"),
    ],
)
def test_a_bad_value_is_one_line_naming_variable_value_and_what_is_allowed(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    [line] = caught.value.problems
    assert line.startswith(f"{name}={value!r}: ") and says in line and "\n" not in line


async def test_disabled_the_worker_counts_events_and_judges_nothing() -> None:
    w = memory_worker(enabled=False)
    for event in (
        {"type": "task_started", "request_id": "r", "goal": "g"},
        {"type": "tool_call", "request_id": "r", "step_index": 1, "tool": "t", "success": True},
        {"type": "final_response", "request_id": "r", "output": "done: 42"},
    ):
        await w.event(event)
    await w.response(
        {"type": "model_response", "session_id": "s", "prompt": "fix x.py", "response": "Ready"}
    )
    assert w.channel("evaluations").sent == [] and w.channel("retries").sent == []
    assert w.ctx.counters["events_counted_tool_call"] == 1
    assert w.ctx.counters["responses_counted"] == 1
    assert not w.ctx.store.is_open("r") and w.channel("dlq").sent == []


async def test_without_trace_capture_steps_keep_no_text_but_the_verdict_still_counts_them() -> None:
    w = memory_worker(trace_capture=False)
    secret_note = "the customer's card 4111 1111 1111 1111 was declined twice"
    await w.event({"type": "task_started", "request_id": "r", "goal": "pay the invoice"})
    await w.event(
        {
            "type": "reasoning_step",
            "request_id": "r",
            "step_index": 1,
            "phase": "synthesis",
            "intent_summary": secret_note,
        }
    )
    await w.event(
        {"type": "tool_call", "request_id": "r", "step_index": 2, "tool": "pay", "success": False}
    )
    stored = " ".join(str(v) for v in w.tables.window_steps.values())
    assert "declined" not in stored and "pay" in stored
    await w.event({"type": "final_response", "request_id": "r", "output": "Paid invoice 7."})
    (evaluation,) = w.channel("evaluations").values()
    assert evaluation["success"] is False  # the failed call still counts
    assert "dropped" not in " ".join(evaluation["reasons"])


def test_the_worker_producer_lingers_as_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _faust_app(load_settings()).conf.producer_linger == 0.005
    monkeypatch.setenv("TRACEJUDGE_PRODUCER_LINGER_MS", "0")
    assert _faust_app(load_settings()).conf.producer_linger == 0


@pytest.mark.parametrize(
    ("env", "judged"),
    [
        ({}, False),  # no endpoint: nothing to judge with
        ({"TRACEJUDGE_LLM_BASE_URL": "http://127.0.0.1:8080/v1"}, True),
        ({"TRACEJUDGE_LLM_API_KEY": "sk-test"}, True),  # the default endpoint, with a key
        ({"TRACEJUDGE_LLM_API_KEY": ""}, False),
        (
            {"TRACEJUDGE_LLM_BASE_URL": "http://x/v1", "TRACEJUDGE_LLM_JUDGE_ENABLED": "false"},
            False,
        ),
        ({"TRACEJUDGE_LLM_JUDGE_ENABLED": "true"}, True),
    ],
)
def test_the_llm_judge_is_on_once_an_endpoint_is_configured(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], judged: bool
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert load_settings().llm_judge_enabled is judged


def test_a_config_file_endpoint_switches_the_judge_on(tmp_path: Path) -> None:
    config = tmp_path / "judge.env"
    config.write_text("TRACEJUDGE_LLM_BASE_URL=http://127.0.0.1:8080/v1\n")
    assert load_settings(str(config)).llm_judge_enabled is True


def test_an_old_setting_name_still_works_with_a_deprecation_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRACEJUDGE_ENABLE_REFLECTION", "false")
    assert load_settings().reflection_enabled is False
    assert "TRACEJUDGE_ENABLE_REFLECTION (environment) is deprecated: use " in (
        capsys.readouterr().err
    )
    monkeypatch.setenv("TRACEJUDGE_REFLECTION_ENABLED", "true")  # the new name wins
    assert load_settings().reflection_enabled is True
    monkeypatch.delenv("TRACEJUDGE_ENABLE_REFLECTION")
    monkeypatch.delenv("TRACEJUDGE_REFLECTION_ENABLED")
    config = tmp_path / "old.env"
    config.write_text("ENABLE_REFLECTION=false\n")
    assert load_settings(str(config)).reflection_enabled is False
    assert f"({config}) is deprecated" in capsys.readouterr().err


def test_a_documented_default_holds_when_another_setting_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docs/configuration.md and describe_settings show each field's default; one derived from
    # other settings (the judge is on once an endpoint is given) is "unset", never a value that
    # giving the endpoint contradicts
    from tracejudge.settings import describe_settings
    from tracejudge.settings.reference import reference

    monkeypatch.setenv("TRACEJUDGE_LLM_BASE_URL", "http://127.0.0.1:8080/v1")
    settings = load_settings()
    for row in reference().splitlines():
        cells = [c.strip() for c in row.split("|")[1:-1]]
        if len(cells) != 3 or not cells[0].startswith("`TRACEJUDGE_"):
            continue
        name, default = cells[0].strip("`")[len("TRACEJUDGE_") :].lower(), cells[1]
        if name != "llm_base_url" and default in ("`true`", "`false`"):
            assert str(getattr(settings, name)).lower() == default.strip("`"), name
    assert "TRACEJUDGE_LLM_JUDGE_ENABLED" in describe_settings()
    line = next(x for x in describe_settings().splitlines() if "LLM_JUDGE_ENABLED" in x)
    assert line.endswith("Default: unset")
