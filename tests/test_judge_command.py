"""`tracejudge judge` refuses to start without a judge to call, before it connects anywhere."""

from __future__ import annotations

import pytest

from tracejudge.streams.cli.main import main


def test_the_judge_command_without_a_judge_endpoint_exits_2(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TRACEJUDGE_LLM_JUDGE_ENABLED", "false")
    monkeypatch.setenv("TRACEJUDGE_KAFKA_BOOTSTRAP", "127.0.0.1:9")  # never reached
    assert main(["judge"]) == 2
    assert "the LLM judge is off" in caplog.text
