"""Mask secrets before any text leaves the process (LLM prompts, evaluations, reflections)."""

from __future__ import annotations

import re
from typing import Any

# Order matters: whole private-key blocks and JWTs before the shorter token shapes.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, flags))
    for kind, pattern, flags in (
        (
            "private_key",
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
            re.DOTALL,
        ),
        ("jwt", r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}", 0),
        ("bearer", r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}", 0),
        ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})", 0),
        ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", 0),
        ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", 0),
        (
            "aws_secret",
            r"(?i)\baws_?secret_?access_?key\b\s*[:=]\s*[\"']?[A-Za-z0-9/+=]{30,}[\"']?",
            0,
        ),
        ("api_key", r"\b(?:sk|rk|pk)-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{16,}", 0),
        (
            "api_key",
            r"(?i)\b(?:api[_-]?key|access[_-]?token|secret|password|passwd)\b"
            r"(\"?\s*[:=]\s*\"?)[^\s\"',;]{6,}",
            0,
        ),
        ("email", r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b", 0),
    )
)


def mask(text: str) -> str:
    """Replace every secret-looking span with `[REDACTED:kind]`."""
    for kind, pattern in _PATTERNS:
        if pattern.groups:
            text = pattern.sub(_keep_label, text)
        else:
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    return text


def _keep_label(match: re.Match[str]) -> str:
    # "api_key=abc123..." keeps its label so the reader still knows what was there
    whole = match.group(0)
    return whole[: match.end(1) - match.start(0)] + "[REDACTED:api_key]"


def mask_any(value: Any) -> Any:
    """Mask every string inside nested lists and dicts."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, list):
        return [mask_any(v) for v in value]
    if isinstance(value, dict):
        return {k: mask_any(v) for k, v in value.items()}
    return value
