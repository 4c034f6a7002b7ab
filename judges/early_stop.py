"""When may an iterative workflow stop? Pure detectors over its `iteration` events.

Signals, strongest first: a <Conclusion> block (stop); <TaskStatus>complete</TaskStatus> (stop
with a conclusion, else finalize: one more round to write it); an execution observation that
shows success and no error (finalize); N successful executions in a row (hint only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

Action = Literal["stop", "finalize", "hint"]
EVIDENCE_LIMIT = 200


@dataclass(frozen=True)
class Round:
    iteration: int
    max_iterations: int | None = None
    response: str = ""
    observation: str = ""
    exec_success: bool | None = None

    @cached_property
    def conclusion(self) -> str | None:
        """Read once per round: every later check of the window looks at all its rounds."""
        return conclusion(self.response)


@dataclass(frozen=True)
class EarlyStopPolicy:
    min_iterations: int = 2
    consecutive_successes: int = 2


@dataclass(frozen=True)
class EarlyStop:
    iteration: int
    action: Action
    reason: str
    evidence: str


def extract_tag(text: str, tag: str) -> str | None:
    """Content of <tag>…</tag>, any case and spacing; an unclosed final tag runs to the end."""
    opening = re.compile(rf"<\s*{tag}\s*>", re.IGNORECASE)
    matches = list(opening.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :]  # the last: models restate the format before answering
    closing = re.search(rf"<\s*/\s*{tag}\s*>", rest, re.IGNORECASE)
    return (rest[: closing.start()] if closing else rest).strip()


def _clip(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EVIDENCE_LIMIT else flat[: EVIDENCE_LIMIT - 1] + "…"


def conclusion(response: str) -> str | None:
    body = extract_tag(response, "conclusion")
    return _clip(body) if body else None


def task_complete(response: str) -> bool:
    status = extract_tag(response, "taskstatus")
    return status is not None and status.strip().lower() == "complete"


_SUCCESS = re.compile(
    r"(?<![\w-])(?:saved successfully|successfully saved|all (?:\d+ )?tests? pass(?:ed|es)?"
    r"|(?:\d+ )?tests? passed|submission created|created successfully|completed successfully"
    r"|build succeeded)(?![\w-])"
    r"|已保存|保存成功|全部通过|测试通过|提交成功|创建成功",
    re.IGNORECASE,
)
# "not all tests passed", "0 tests passed", "tests passed: 0", "未全部通过", "测试没通过"
_NOT_BEFORE = re.compile(
    r"(?:\b(?:not|no|never|none of the)\s+(?:all\s+)?|n't\s+(?:all\s+)?|未|没有?|不|并非)$",
    re.IGNORECASE,
)
_ZERO_COUNT = re.compile(r"^(?<!\d)0\s+|^(?:all\s+)?0\s+tests?", re.IGNORECASE)
_ZERO_AFTER = re.compile(r"^\s*[:=]\s*0(?!\d)")
_ERROR = re.compile(
    r"(?<![\w-])(?:traceback|error:|exception|failed|failure)(?![\w-])|失败|错误|异常",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"(?:\b(?:no|without|zero|never)\s+|(?<!\d)0\s*|无|没有)$", re.IGNORECASE)


def errors_in(observation: str) -> list[str]:
    """Error words, word-aware: "0 errors", "error-free", "no exceptions" do not count."""
    found = []
    for match in _ERROR.finditer(observation):
        before = observation[max(0, match.start() - 12) : match.start()]
        if _NEGATION.search(before):
            continue
        found.append(match.group(0))
    return found


def observation_success(observation: str) -> str | None:
    """The success signal an observation shows, if it shows one and no error word: negated or
    zero-count forms ("not all tests passed", "0 tests passed", "未全部通过") are not success."""
    if errors_in(observation):
        return None
    for hit in _SUCCESS.finditer(observation):
        before = observation[max(0, hit.start() - 16) : hit.start()]
        if _NOT_BEFORE.search(before) or _ZERO_COUNT.search(hit.group(0)):
            continue
        if _ZERO_AFTER.search(observation[hit.end() : hit.end() + 8]):
            continue
        return _clip(hit.group(0))
    return None


def check_early_stop(
    rounds: list[Round], policy: EarlyStopPolicy, emitted: frozenset[Action] = frozenset()
) -> EarlyStop | None:
    """The decision after the latest round, if any: at most one stop or finalize, one hint."""
    if not rounds:
        return None
    current = max(rounds, key=lambda r: r.iteration)
    if current.max_iterations and current.iteration >= current.max_iterations:
        return None  # the loop ends anyway
    if current.iteration < policy.min_iterations:
        return None
    done = bool(emitted & {"stop", "finalize"})
    if not done:
        concluded = next(
            (c for r in sorted(rounds, key=lambda r: r.iteration) if (c := r.conclusion)),
            None,
        )
        if concluded:
            return EarlyStop(current.iteration, "stop", "conclusion", concluded)
        if task_complete(current.response):
            return EarlyStop(
                current.iteration, "finalize", "task_status", "<TaskStatus>complete</TaskStatus>"
            )
        success = observation_success(current.observation)
        if success:
            return EarlyStop(current.iteration, "finalize", "observation_success", success)
    if "hint" in emitted or done:
        return None
    streak = 0
    for r in sorted(rounds, key=lambda r: r.iteration, reverse=True):
        if r.exec_success is not True:
            break
        streak += 1
    if streak >= policy.consecutive_successes:
        return EarlyStop(
            current.iteration,
            "hint",
            "consecutive_success",
            f"{streak} successful executions in a row",
        )
    return None
