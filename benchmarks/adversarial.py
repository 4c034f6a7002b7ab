"""Every pure function that reads untrusted text, on adversarial input of 1,000 and 8,000
characters: the time ratio must stay near 8 (linear), never near 64 (quadratic).

    python -m benchmarks.adversarial

Inputs: one long token, repeated separators, nested brackets, CJK without spaces, digits with
separators, and repeated openings of what the classifiers look for (tags, e-mail, keys). Prints
the worst case per function; the bar: the 8k time at most 10x the 1k time.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable

from tracejudge.judges.answers.generic import assess_answer
from tracejudge.judges.answers.prompt_kind import prompt_is_complex
from tracejudge.judges.inflight.early_stop import errors_in, extract_tag, observation_success
from tracejudge.judges.llm.answer import InvalidAnswer, parse_answer
from tracejudge.judges.masking.redact import mask
from tracejudge.judges.rules.claims import admitted_failure, claimed_actions, handoff
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.models.events import parse_event
from tracejudge.models.window import Window, assemble_window

UNITS: dict[str, str] = {
    "long token": "a",
    "digits": "1",
    "separators": "=-",
    "spaced digits": "12 ",
    "brackets": "[{(",
    "cjk": "你好世界",
    "rtl arabic": "مرحبا بالعالم ",
    "rtl hebrew": "שלום עולם ",
    "emoji": "🙂🚀👩‍💻",
    "mixed scripts": "a你ب🙂1.",
    "dots": "...",
    "at signs": "a@b.",
    "tags": "<answer>",
    "json opens": '{"a":',
    "keys": "password=",
    "url": "http://a:",
    "base64": "eyJhbGciOi.",
    "begin key": "-----BEGIN PRIVATE KEY-----",
    "claims": "I have ",
    "handoffs": "I have transferred ",
}


def _judge_content(text: str) -> None:
    body = {"choices": [{"message": {"content": text}}]}
    with contextlib.suppress(InvalidAnswer):
        parse_answer(body)


def _rules(text: str) -> None:
    """A whole run judged by the rules, the text in every field an agent fills. The run is
    parsed on the first call only (parsing has its own row): `timed` keeps the best call."""
    window = _WINDOWS.get(text)
    if window is None:
        events = [
            {"type": "task_started", "request_id": "r", "goal": text},
            {
                "type": "reasoning_step",
                "request_id": "r",
                "step_index": 1,
                "phase": "plan",
                "intent_summary": text,
            },
            {
                "type": "tool_call",
                "request_id": "r",
                "step_index": 2,
                "tool": "search",
                "args_summary": text,
                "success": True,
                "result_preview": text,
            },
            {
                "type": "tool_call",
                "request_id": "r",
                "step_index": 3,
                "tool": "refund",
                "args_summary": text,
                "success": False,
                "error": text,
            },
            {"type": "final_response", "request_id": "r", "output": text},
        ]
        window = assemble_window(
            "r",
            [parse_event(json.dumps(e)) for e in events],
            closed_by="final_response",
            step_count=3,
            steps_dropped=0,
        )
        _WINDOWS.clear()  # one text at a time
        _WINDOWS[text] = window
    RuleJudge().judge(window)


_WINDOWS: dict[str, Window] = {}


def _event(text: str) -> None:
    parse_event(json.dumps({"type": "final_response", "request_id": "r", "output": text}))


FUNCTIONS: dict[str, Callable[[str], object]] = {
    "rules.RuleJudge.judge (a run)": _rules,
    "redact.mask": mask,
    "generic.assess_answer": lambda text: assess_answer("analyze this repository", text),
    "generic.prompt_is_complex": prompt_is_complex,
    "early_stop.extract_tag": lambda text: extract_tag(text, "answer"),
    "early_stop.errors_in": errors_in,
    "early_stop.observation_success": observation_success,
    "llm.parse_answer (content)": _judge_content,
    "outcomes.claimed_actions": claimed_actions,
    "outcomes.admitted_failure": admitted_failure,
    "outcomes.handoff": handoff,
    "events.parse_event": _event,
}


def timed(fn: Callable[[str], object], text: str, budget_s: float = 0.2) -> float:
    """Seconds per call (best of as many calls as fit the budget, at least 3)."""
    best, spent, calls = float("inf"), 0.0, 0
    while calls < 3 or spent < budget_s:
        started = time.perf_counter()
        fn(text)
        took = time.perf_counter() - started
        best, spent, calls = min(best, took), spent + took, calls + 1
        if calls >= 200:
            break
    return best


def of_length(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def main() -> None:
    print(f"{'function':<30} {'worst input':<14} {'1k ms':>8} {'8k ms':>8} {'ratio':>6}")
    worst_ratio, worst_at = 0.0, ""
    for name, fn in FUNCTIONS.items():
        rows = []
        for label, unit in UNITS.items():
            small, large = timed(fn, of_length(unit, 1000)), timed(fn, of_length(unit, 8000))
            rows.append((large / max(small, 1e-7), label, small, large))
        ratio, label, small, large = max(rows, key=lambda r: (r[3], r[0]))
        # below 50 µs at 8k a call is effectively constant; its ratio is timer noise
        measurable = [r for r in rows if r[3] >= 5e-5]
        if measurable:
            top = max(measurable)
            if top[0] > worst_ratio:
                worst_ratio, worst_at = top[0], f"{name} on {top[1]}"
        print(f"{name:<30} {label:<14} {small * 1e3:8.3f} {large * 1e3:8.3f} {ratio:6.1f}")
    print(
        f"worst 8k/1k ratio over every function and input taking 50 µs or more at 8k: "
        f"{worst_ratio:.1f} ({worst_at}; bar: 10)"
    )


if __name__ == "__main__":
    main()
