"""The judges: pure functions from what an agent did to a verdict. No Kafka, Faust or Redis.

A judge reads a closed request's `Window` (tracejudge.models.window) and gives a verdict; the
worker, `replay` and the tests call the same ones. The public API:

- `Judge`: what a rule judge is (`RuleJudge` is the one shipped); `RuleVerdict` its verdict.
- `conclude`: blends the rules with the LLM judge's `JudgeOutcome` under a `Policy`, settles
  `success` and `incomplete`, and plans what one closed request emits (`Verdict`).
- `parse_answer`: an LLM judge's Chat Completions answer as a `JudgeAnswer`.
- `assess_answer`: generic / clarification / substantive, and whether to retry.
- `check_early_stop`: the decision an iterative loop's rounds (`Round`) call for.
- `mask`: secrets and personal data out of a text.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tracejudge.judges.answers.generic import AnswerAssessment, assess_answer
from tracejudge.judges.inflight.early_stop import (
    EarlyStop,
    EarlyStopPolicy,
    Round,
    check_early_stop,
)
from tracejudge.judges.llm.answer import InvalidAnswer, JudgeAnswer, parse_answer

# first: from here on, events parsed in this process are clipped off secrets
# (judges/masking/clipping.py)
from tracejudge.judges.masking import clipping  # noqa: F401
from tracejudge.judges.masking.redact import mask
from tracejudge.judges.rules.agent_norms import Norms, RunStats
from tracejudge.judges.rules.judge import RuleJudge, RuleVerdict
from tracejudge.judges.verdict.conclude import JudgeOutcome, Policy, Verdict, WindowFacts, conclude
from tracejudge.models.window import Window


@runtime_checkable
class Judge(Protocol):
    """Scores a closed window. `stats`: the run's exact counts (the worker keeps them beyond
    the step limit); `norms`: what is normal for its agent, when learned."""

    version: str

    def judge(
        self, window: Window, stats: RunStats | None = None, norms: Norms | None = None
    ) -> RuleVerdict: ...


__all__ = [
    "AnswerAssessment",
    "EarlyStop",
    "EarlyStopPolicy",
    "InvalidAnswer",
    "Judge",
    "JudgeAnswer",
    "JudgeOutcome",
    "Norms",
    "Policy",
    "Round",
    "RuleJudge",
    "RuleVerdict",
    "RunStats",
    "Verdict",
    "WindowFacts",
    "assess_answer",
    "check_early_stop",
    "conclude",
    "mask",
    "parse_answer",
]
