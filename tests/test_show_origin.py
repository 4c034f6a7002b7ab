"""`tracejudge show` on a follow-up: the request it continues, in the text output as in --json,
on one line whatever the ids hold."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.test_terminal_text import FORGED_LINE, HOSTILE, evaluation, obeyed
from tracejudge.models.outputs import Origin
from tracejudge.settings import Settings
from tracejudge.streams.cli import main as cli_main
from tracejudge.streams.explorer.show import Found, render


def follow_up(origin: Origin | None) -> dict[str, Any]:
    e = {**evaluation(), "request_id": "r-2", "agent_name": "bot", "summary": "done"}
    e["reasons"], e["remaining_steps"] = [], []
    e["origin"] = None if origin is None else origin.model_dump(mode="json")
    return e


def test_a_follow_up_names_its_parent_its_chain_and_the_parents_verdict() -> None:
    origin = Origin(
        request_id="r-1",
        root_request_id="r-0",
        found=True,
        reflection_round=1,
        overall_score=40,
        success=False,
        incomplete=True,
        verdict_ts=1_700_000_000,
    )
    text = render(follow_up(origin), [])
    [line] = [line for line in text.splitlines() if line.startswith("follow-up of")]
    assert line == (
        "follow-up of r-1 (chain from r-0): its score 40, success False, incomplete True, round 1"
    )
    # the first follow-up of a chain: its parent is the root, said once
    first = Origin(request_id="r-0", root_request_id="r-0", found=False)
    assert "follow-up of r-0: its verdict not found" in render(follow_up(first), [])
    assert "follow-up of" not in render(follow_up(None), [])  # a chain's first request


def test_the_origin_line_shows_control_characters_and_stays_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    origin = Origin(request_id=HOSTILE, root_request_id=HOSTILE + "-root", found=False)

    async def fetch(settings: Settings, request_id: str) -> Found:  # Redis, as read
        return Found(follow_up(origin), [], "none")

    monkeypatch.setattr("tracejudge.streams.explorer.show.fetch", fetch)
    assert cli_main._show(Settings(redis_url=""), "r-2", as_json=False) == 0
    out = capsys.readouterr().out
    assert obeyed(out, allowed="\n") == []
    assert not any(line.startswith(FORGED_LINE) for line in out.splitlines())
    [line] = [line for line in out.splitlines() if line.startswith("follow-up of")]
    assert "␛]0;owned␇" in line and line.endswith(
        "its verdict not found (no Redis, expired, or never seen)"
    )
    assert cli_main._show(Settings(redis_url=""), "r-2", as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["evaluation"]["origin"]["request_id"] == HOSTILE
