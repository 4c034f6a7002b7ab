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


@cache
def final_judge_prompt() -> JudgePrompt:
    system = read_prompt("final_judge.system.md")
    schema_text = read_prompt("final_judge.schema.json")
    digest = hashlib.sha256((system + "\x00" + schema_text).encode("utf-8")).hexdigest()
    return JudgePrompt(system=system, schema=json.loads(schema_text), version=digest[:12])
