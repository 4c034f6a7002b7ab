"""When may an iterative workflow stop? Pure detectors over its `iteration` events.

Signals, strongest first: a <Conclusion> block (stop); <TaskStatus>complete</TaskStatus> (stop
with a conclusion, else finalize: one more round to write it); an execution observation that
shows success and no error (finalize); a round that brings no <Experiment> to run, in a loop
whose rounds carried one, with no status saying it is still going (stop: the loop has nothing
left to execute); N successful executions in a row (hint only).

A round is read once, as its event arrives, into `Round`: a few flags and short evidence, never
the texts, so the detector keeps working however long the loop runs and whatever the window
keeps of its steps (beyond the step limit, or with trace capture off, only the round is kept).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from tracejudge.judges.masking.clipping import head_whole

Action = Literal["stop", "finalize", "hint"]
Reason = Literal[
    "conclusion", "task_status", "observation_success", "no_experiment", "consecutive_success"
]
# TaskStatus as the round states it: complete, some other status (still going), or none
Status = Literal["complete", "other"] | None
EVIDENCE_LIMIT = 200
# the adaptive-iteration design's loop length, used when the events carry no max_iterations
DEFAULT_MAX_ITERATIONS = 5


@dataclass(frozen=True)
class Round:
    """What the detector reads of one round."""

    iteration: int
    max_iterations: int | None = None
    exec_success: bool | None = None
    conclusion: str | None = None  # the <Conclusion> block, clipped
    status: Status = None
    success: str | None = None  # the observation's success signal, when it shows no error
    experiment: bool = False  # the response carries a non-empty <Experiment> block
    answered: bool = False  # the response is not empty

    @classmethod
    def read(
        cls,
        iteration: int,
        max_iterations: int | None = None,
        response: str = "",
        observation: str = "",
        exec_success: bool | None = None,
    ) -> Round:
        return cls(
            iteration=iteration,
            max_iterations=max_iterations,
            exec_success=exec_success,
            conclusion=conclusion(response),
            status=task_status(response),
            success=observation_success(observation),
            experiment=bool(extract_tag(response, "experiment")),
            answered=bool(response.strip()),
        )

    def to_record(self) -> dict[str, object]:
        """The round's signals as a stub keeps them (short keys: one per round, every round)."""
        fields = {
            "c": self.conclusion,
            "s": self.status,
            "o": self.success,
            "x": self.experiment or None,
            "a": self.answered or None,
        }
        return {k: v for k, v in fields.items() if v is not None}

    @classmethod
    def of_record(
        cls,
        iteration: int,
        max_iterations: int | None,
        exec_success: bool | None,
        record: dict[str, object],
    ) -> Round:
        status = record.get("s")
        return cls(
            iteration=iteration,
            max_iterations=max_iterations,
            exec_success=exec_success,
            conclusion=str(record["c"]) if record.get("c") else None,
            status="complete" if status == "complete" else "other" if status else None,
            success=str(record["o"]) if record.get("o") else None,
            experiment=bool(record.get("x")),
            answered=bool(record.get("a")),
        )


@dataclass(frozen=True)
class EarlyStopPolicy:
    min_iterations: int = 2
    consecutive_successes: int = 2
    max_iterations: int = DEFAULT_MAX_ITERATIONS  # when the rounds carry none


@dataclass(frozen=True)
class EarlyStop:
    iteration: int
    action: Action
    reason: Reason
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
    # masked only where it is stored: a secret split by the cut would not be recognised there
    return flat if len(flat) <= EVIDENCE_LIMIT else head_whole(flat, EVIDENCE_LIMIT - 1) + "…"


def conclusion(response: str) -> str | None:
    body = extract_tag(response, "conclusion")
    return _clip(body) if body else None


def task_status(response: str) -> Status:
    """Exactly "complete" is complete: "incomplete", "not complete", "complete?" are not."""
    status = extract_tag(response, "taskstatus")
    if status is None:
        return None
    return "complete" if status.strip().lower() == "complete" else "other"


def task_complete(response: str) -> bool:
    return task_status(response) == "complete"


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
    r"(?<![\w-])(?:traceback|errors?|exceptions?|failed|failure|fatal)(?![\w-])"
    r"|失败|错误|异常|报错",
    re.IGNORECASE,
)
# an exception's class name, as runtimes print it: "ValueError: bad value", "IOException"
_EXCEPTION_NAME = re.compile(r"(?<![\w-])[A-Z]\w*(?:Error|Exception)(?![\w-])")
_NEGATION = re.compile(r"(?:\b(?:no|without|zero|never)\s+|(?<!\d)0\s*|无|没有)$", re.IGNORECASE)


def errors_in(observation: str) -> list[str]:
    """Error words, word-aware: "0 errors", "error-free", "no exceptions", "errors: 0" do not
    count; "ValueError: bad value" or "an error occurred" after a success word do."""
    found = []
    hits = sorted(
        [*_ERROR.finditer(observation), *_EXCEPTION_NAME.finditer(observation)],
        key=lambda m: m.start(),
    )
    for match in hits:
        before = observation[max(0, match.start() - 12) : match.start()]
        after = observation[match.end() : match.end() + 8]
        if _NEGATION.search(before) or _ZERO_AFTER.search(after):
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
    ordered = sorted(rounds, key=lambda r: r.iteration)
    current = ordered[-1]
    if current.iteration >= (current.max_iterations or policy.max_iterations):
        return None  # the loop ends anyway
    if current.iteration < policy.min_iterations:
        return None
    done = bool(emitted & {"stop", "finalize"})
    if not done:
        found = _stop_or_finalize(ordered, current)
        if found is not None:
            return found
    if "hint" in emitted or done:
        return None
    streak = 0
    for r in reversed(ordered):
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


def _stop_or_finalize(ordered: list[Round], current: Round) -> EarlyStop | None:
    concluded = next((r.conclusion for r in ordered if r.conclusion), None)
    if concluded:
        return EarlyStop(current.iteration, "stop", "conclusion", concluded)
    if current.status == "complete":
        return EarlyStop(
            current.iteration, "finalize", "task_status", "<TaskStatus>complete</TaskStatus>"
        )
    if current.success:
        return EarlyStop(current.iteration, "finalize", "observation_success", current.success)
    if (
        current.answered
        and not current.experiment
        and current.status is None
        and any(r.experiment for r in ordered[:-1])
    ):
        # The design's loop ends when a round brings no code to run. Only in a loop whose rounds
        # did carry <Experiment> blocks, and not when the round says it is still going: an
        # agent that never uses the tag is not told to stop for lacking it.
        return EarlyStop(
            current.iteration,
            "stop",
            "no_experiment",
            f"round {current.iteration} has no <Experiment> to run",
        )
    return None
