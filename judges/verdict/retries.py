"""What to do with one model answer: nothing, a retry request, or give up (and alert)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tracejudge.judges.answers.generic import assess_answer, continue_prompt
from tracejudge.judges.verdict.conclude import stable_id
from tracejudge.models.outputs import Alert, RetryRequest
from tracejudge.models.responses import ModelResponse


@dataclass(frozen=True)
class RetryPlan:
    fingerprint: str
    retry: RetryRequest | None = None
    alert: Alert | None = None


def fingerprint(response: ModelResponse) -> str:
    """Identifies one answer: the same message delivered twice has the same fingerprint."""
    parts = (
        response.session_id,
        response.request_id or "",
        str(response.attempt),
        response.prompt,
        response.response,
    )
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:24]


def plan_retry(response: ModelResponse, max_retries: int, now: float) -> RetryPlan:
    mark = fingerprint(response)
    assessment = assess_answer(response.prompt, response.response)
    if not assessment.retry:
        return RetryPlan(mark)
    c = assessment.classification
    common = dict(
        retry_id=stable_id("retry", mark),
        session_id=response.session_id,
        request_id=response.request_id,
        agent=response.agent,
        response_type=c.response_type,
        detected_pattern=c.detected_pattern,
        reasons=assessment.reasons,
        ts=now,
    )
    if response.attempt < max_retries:
        return RetryPlan(
            mark,
            RetryRequest(
                type="retry_request",
                attempt=response.attempt + 1,
                continue_prompt=continue_prompt(response.prompt),
                **common,  # type: ignore[arg-type]
            ),
        )
    exhausted = RetryRequest(type="retry_exhausted", attempt=response.attempt, **common)  # type: ignore[arg-type]
    alert = Alert.of(
        "retries_exhausted",
        mark,
        "warning",
        f"answer still {c.response_type} after {response.attempt} retr"
        f"{'y' if response.attempt == 1 else 'ies'} (limit {max_retries}); "
        "the caller keeps the original answer",
        now,
        request_id=response.request_id,
        session_id=response.session_id,
    )
    return RetryPlan(mark, exhausted, alert)
