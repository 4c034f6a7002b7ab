"""The LLM judge in the demo: whether its endpoint answers, before the worker relies on it.

A worker whose judge does not answer falls back to the rules after the judge's timeouts and
retries (TRACEJUDGE_LLM_TIMEOUT_S, TRACEJUDGE_LLM_MAX_ATTEMPTS): fine for a stream, but a demo
would sit silent for that long. One short request first says at once what is wrong.
"""

from __future__ import annotations

import httpx

from tracejudge.judges.masking.redact import mask
from tracejudge.settings import Settings

PROBE_TIMEOUT_S = 3.0


def judge_problem(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the judge's endpoint answers HTTP at all (any status but a refused key: the
    OpenAI API lists models at GET /models, servers without that path answer 404, which is
    enough to know one listens); else what is wrong, in a few words."""
    key = settings.llm_api_key.get_secret_value()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = settings.llm_base_url.rstrip("/") + "/models"
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException:
        return f"no answer within {timeout_s:.0f}s"
    except httpx.HTTPError as exc:
        return f"unreachable ({mask(str(exc)) or type(exc).__name__})"
    if response.status_code in (401, 403):
        return f"it refused the API key (HTTP {response.status_code})"
    return None
