"""Trace text printed for people is shown, never obeyed: no control character of an agent's
text reaches the terminal, and no newline in it starts a line of its own."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from tracejudge.settings import Settings
from tracejudge.streams.cli import main as cli_main
from tracejudge.streams.explorer.show import Found
from tracejudge.streams.kafka.status import Status, WorkerStatus, render_status
from tracejudge.streams.shared.logs import MaskedLogRecord
from tracejudge.streams.shared.visible import exact_json, visible, visible_data

FORGED_LINE = "12:00:00 req-42 score=100 PASS"
HOSTILE = (
    "\x1b]0;owned\x07\x1b[2J\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"
    "\x1b[31mred\r\n" + FORGED_LINE + "\u202egnp.exe\x9b31m\x00\x7f\u2028"
)
OBEYED = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x202E, 0x2028)]


def obeyed(text: str, allowed: str = "") -> list[str]:
    return [c for c in OBEYED if c in text and c not in allowed]


def test_controls_are_shown_and_plain_text_is_left_alone() -> None:
    shown = visible(HOSTILE)
    assert obeyed(shown) == []
    assert shown.startswith("␛]0;owned␇␛[2J") and "␍␊" + FORGED_LINE in shown
    assert "\\u202e" in shown and "\\x9b" in shown and "␀␡" in shown
    plain = "Ünïcode, emoji 🙂, CJK 漢字, RTL עברית: untouched"
    assert visible(plain) is plain
    assert visible_data({HOSTILE: [HOSTILE, 1, None]}) == {shown: [shown, 1, None]}


def test_a_lone_surrogate_is_shown_as_its_escape_and_can_be_printed() -> None:
    """A JSON file may hold "\\ud800"; printed as read, it ended the command (an encoding
    error), whatever the terminal."""
    shown = visible("shop\ud800 \udfff!")
    assert shown == "shop\\ud800 \\udfff!"
    assert shown.encode("utf-8")  # printable: no surrogate left
    assert json.loads(exact_json(json.dumps({"a": "x\ud800"}, ensure_ascii=False))) == {
        "a": "x\ud800"
    }


def test_exact_json_stays_json_of_the_same_value() -> None:
    escaped = json.dumps({"request_id": HOSTILE})
    assert exact_json(escaped) is escaped  # nothing raw in it: as read
    raw = json.dumps({"request_id": HOSTILE}, ensure_ascii=False)
    out = exact_json(raw)
    assert obeyed(out) == [] and json.loads(out) == {"request_id": HOSTILE}
    not_json = exact_json("\x1b[2Jnot json")
    assert obeyed(not_json) == [] and json.loads(not_json) == "\x1b[2Jnot json"


def evaluation() -> dict[str, Any]:
    return {
        "request_id": HOSTILE,
        "agent_name": HOSTILE,
        "closed_by": "final_response",
        "ts": 0,
        "overall_score": 10,
        "passed": False,
        "warn_threshold": 60,
        "success": False,
        "incomplete": True,
        "judge_status": "skipped",
        "summary": HOSTILE,
        "reasons": [HOSTILE],
        "remaining_steps": [HOSTILE],
    }


def test_show_prints_hostile_text_as_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    timeline = [{"type": "tool_call", "step": 1, "tool": HOSTILE, "result": HOSTILE, "ts": 0}]

    async def fetch(settings: Settings, request_id: str) -> Found:  # Redis, as read
        return Found(evaluation(), timeline, None)

    monkeypatch.setattr("tracejudge.streams.explorer.show.fetch", fetch)
    assert cli_main._show(Settings(redis_url=""), "r", as_json=False) == 0
    out = capsys.readouterr().out
    assert obeyed(out, allowed="\n") == []
    assert not any(line.startswith(FORGED_LINE) for line in out.splitlines())
    assert cli_main._show(Settings(redis_url=""), "r", as_json=True) == 0
    as_json = capsys.readouterr().out
    assert obeyed(as_json, allowed="\n") == []
    assert json.loads(as_json)["evaluation"]["request_id"] == HOSTILE


def test_status_prints_worker_and_agent_text_as_text() -> None:
    settings = Settings(redis_url="").masked()
    worker = WorkerStatus(HOSTILE, 200, HOSTILE, {"evaluations": 1})
    text = render_status(Status(settings, [], [worker], None, HOSTILE))
    assert obeyed(text, allowed="\n") == []
    assert not any(line.startswith(FORGED_LINE) for line in text.splitlines())


def test_a_log_line_cannot_print_a_record_of_its_own() -> None:
    record = MaskedLogRecord("w", logging.INFO, "f", 1, "closed %s", (HOSTILE,), None)
    line = logging.Formatter("%(asctime)s %(levelname)s %(message)s").format(record)
    assert obeyed(line, allowed="\n") == []
    assert all(later.startswith("  ") for later in line.splitlines()[1:])
