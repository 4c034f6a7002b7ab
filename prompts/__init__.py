"""Prompt files, loaded once at start through one helper (never inside the event loop)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any


def read_prompt(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class JudgePrompt:
    system: str
    schema: dict[str, Any]
    version: str  # hash of both files: part of every cache key and evaluator version
    # scores a team asked for beside the judge's own (judges/llm/criteria.py): the answer keeps
    # only these of the keys it does not know
    dimensions: tuple[str, ...] = ()
    cache_tag: str = ""  # a digest of what was added to the prompt: part of the cache key


@cache
def final_judge_prompt() -> JudgePrompt:
    system = read_prompt("final_judge.system.md")
    schema_text = read_prompt("final_judge.schema.json")
    digest = hashlib.sha256((system + "\x00" + schema_text).encode("utf-8")).hexdigest()
    return JudgePrompt(system=system, schema=json.loads(schema_text), version=digest[:12])


def task_status_prompt(language: str = "en") -> str:
    """The snippet an iterative loop adds to its system prompt so its rounds say when the task
    is done (`<TaskStatus>`, `<Conclusion>`): what the early-stop detector reads. "en" or "zh"."""
    text = read_prompt("task_status.md")
    body = text[text.index("-->") + 3 :]
    english, chinese = (part.strip() for part in body.split("\n---\n"))
    if language not in ("en", "zh"):
        raise ValueError(f"language must be 'en' or 'zh', not {language!r}")
    return english if language == "en" else chinese
