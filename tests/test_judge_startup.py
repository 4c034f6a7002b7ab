"""The line a start logs about the LLM judge: on, with the model, the endpoint's host and the
share of requests it reads, a hosted model said as such; or off, and why."""

from __future__ import annotations

import logging

import pytest

from tracejudge.settings import Settings, load_settings
from tracejudge.streams.judge.startup import endpoint_host, judge_line, log_judge_line


def test_an_api_key_alone_says_a_hosted_model_judges_every_request(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TRACEJUDGE_LLM_API_KEY", "sk-secret-value")
    monkeypatch.setenv("TRACEJUDGE_REDIS_URL", "")
    settings = load_settings()
    with caplog.at_level(logging.INFO, "tracejudge.streams.judge.startup"):
        log_judge_line(settings)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(
        "LLM judge on: model gpt-4o-mini at api.openai.com, judging every closed request "
        "(TRACEJUDGE_LLM_SAMPLE_RATE=1)"
    )
    assert "a hosted model (only TRACEJUDGE_LLM_API_KEY is set)" in line
    assert "paid call at that rate" in line
    assert "sk-secret-value" not in line


def test_an_own_server_is_named_by_host_alone_with_its_sample() -> None:
    settings = Settings(
        redis_url="",
        llm_base_url="http://judge:s3cret@vllm.internal:8000/v1?token=x",
        llm_model="qwen2.5-7b",
        llm_sample_rate=0.05,
        llm_sample_rates="planner=0.5",
    )
    line = judge_line(settings)
    assert line == (
        "LLM judge on: model qwen2.5-7b at vllm.internal:8000, judging every flagged request "
        "and 5% of the others (TRACEJUDGE_LLM_SAMPLE_RATE=0.05, "
        "TRACEJUDGE_LLM_JUDGE_FLAGGED=true; per agent: TRACEJUDGE_LLM_SAMPLE_RATES=planner=0.5)"
    )
    unflagged = settings.model_copy(update={"llm_judge_flagged": False, "worker_judges": False})
    line = judge_line(unflagged)
    assert "judging 5% of the closed requests (" in line
    assert line.endswith(
        "; the calls are made by `tracejudge judge` (TRACEJUDGE_WORKER_JUDGES=false)"
    )


def test_off_says_why() -> None:
    assert judge_line(Settings(redis_url="")).startswith(
        "LLM judge off: no endpoint configured (TRACEJUDGE_LLM_BASE_URL or TRACEJUDGE_LLM_API_KEY)"
    )
    off = Settings(redis_url="", llm_base_url="http://vllm:8000/v1", llm_judge_enabled=False)
    assert judge_line(off).startswith("LLM judge off (TRACEJUDGE_LLM_JUDGE_ENABLED=false)")


def test_the_host_never_carries_credentials_or_a_path() -> None:
    assert endpoint_host("https://user:pw@api.example.com/v1") == "api.example.com"
    assert endpoint_host("http://127.0.0.1:8080/v1") == "127.0.0.1:8080"
    assert endpoint_host("http://host:notaport/v1") == "host"
