"""The line a worker or `tracejudge judge` logs at start about the LLM judge: on, with which
model at which endpoint host and which share of the requests, or off and why.

Setting only TRACEJUDGE_LLM_API_KEY turns the judge on against the default endpoint (a hosted
model) at the default sample rate: every closed request. The line says so, since that is a
cost per request someone may not have meant.
"""

from __future__ import annotations

import logging
import urllib.parse

from tracejudge.settings import Settings

log = logging.getLogger(__name__)


def endpoint_host(base_url: str) -> str:
    """The host (and port, when given) of an endpoint URL: never its path, query or any
    credentials in it."""
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname or base_url
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: the host alone
        port = None
    return host if port is None else f"{host}:{port}"


def selection_words(settings: Settings) -> str:
    """Which closed requests the judge reads (`judges/llm/sampling.Selection`), in words."""
    rate = settings.llm_sample_rate
    share = f"{rate * 100:g}%"
    if rate >= 1.0:
        chosen = "every closed request"
    elif settings.llm_judge_flagged:
        chosen = f"every flagged request and {share} of the others"
    else:
        chosen = f"{share} of the closed requests"
    chosen += f" (TRACEJUDGE_LLM_SAMPLE_RATE={rate:g}"
    if rate < 1.0:
        chosen += f", TRACEJUDGE_LLM_JUDGE_FLAGGED={str(settings.llm_judge_flagged).lower()}"
    if settings.llm_sample_rates.strip():
        chosen += f"; per agent: TRACEJUDGE_LLM_SAMPLE_RATES={settings.llm_sample_rates.strip()}"
    return chosen + ")"


def judge_line(settings: Settings) -> str:
    """The start line about the LLM judge."""
    if not settings.llm_judge_enabled:
        given = settings.model_fields_set & {"llm_base_url", "llm_api_key"}
        if given:  # an endpoint is configured, and the judge turned off on purpose
            return "LLM judge off (TRACEJUDGE_LLM_JUDGE_ENABLED=false): the rules decide alone"
        return (
            "LLM judge off: no endpoint configured (TRACEJUDGE_LLM_BASE_URL or "
            "TRACEJUDGE_LLM_API_KEY); the rules decide alone"
        )
    line = (
        f"LLM judge on: model {settings.llm_model} at {endpoint_host(settings.llm_base_url)}, "
        f"judging {selection_words(settings)}"
    )
    if "llm_base_url" not in settings.model_fields_set:  # the default endpoint: hosted
        why = (
            "only TRACEJUDGE_LLM_API_KEY is set"
            if "llm_api_key" in settings.model_fields_set
            else "TRACEJUDGE_LLM_BASE_URL is not set"
        )
        line += (
            f"; a hosted model ({why}): each request judged is a paid call at that rate "
            "(TRACEJUDGE_LLM_BASE_URL for your own server, TRACEJUDGE_LLM_SAMPLE_RATE to judge "
            "fewer, TRACEJUDGE_LLM_BUDGET_* to cap it)"
        )
    if not settings.worker_judges:
        line += "; the calls are made by `tracejudge judge` (TRACEJUDGE_WORKER_JUDGES=false)"
    return line


def log_judge_line(settings: Settings, logger: logging.Logger = log) -> None:
    logger.info("%s", judge_line(settings))
