"""Mask secrets and personal data before any text leaves the process.

Every output topic, Redis value, log line built from a trace, and body sent to the judge goes
through `mask` (or `mask_any` for nested values). Each detector finds spans; overlapping spans
merge, and each span becomes `[REDACTED:kind]`.

Detectors (`detectors.py`): vendors' token shapes from detect-secrets' plugins, and patterns
with a checksum where the kind has one (payment cards, IBAN, Chinese resident ID, US SSN, phone
numbers), so that order numbers and timestamps stay; measured by `benchmarks/redaction.py`.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel

from tracejudge.judges.masking.detectors import PATTERNS, Span, plugin_spans


def spans(text: str) -> list[Span]:
    """What `mask` would replace, merged: overlapping spans become one (the first kind)."""
    found = sorted(
        [*(s for p in PATTERNS for s in p.spans(text)), *plugin_spans(text)],
        key=lambda s: (s[0], -s[1]),
    )
    merged: list[Span] = []
    for start, end, kind in found:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], end), last[2])
        else:
            merged.append((start, end, kind))
    return merged


def mask(text: str) -> str:
    """Replace every secret or personal-data span with `[REDACTED:kind]`."""
    if len(text) < 6:
        return text
    if len(text) <= CACHED_CHARS:
        return _mask_short(text)
    return _mask(text)


# Most texts masked on the way out are the verdict's own sentences ("4 tool call(s); final
# response present"), the same for thousands of requests: each ran every detector (~20
# patterns) again. Masking is a pure function of the text, so short texts are remembered;
# bounded at CACHED_TEXTS x CACHED_CHARS characters, in this process's memory only.
CACHED_CHARS = 512
CACHED_TEXTS = 4096


@functools.lru_cache(maxsize=CACHED_TEXTS)
def _mask_short(text: str) -> str:
    return _mask(text)


def _mask(text: str) -> str:
    found = spans(text)
    if not found:
        return text
    out, at = [], 0
    for start, end, kind in found:
        out.append(text[at:start])
        out.append(f"[REDACTED:{kind}]")
        at = end
    out.append(text[at:])
    return "".join(out)


# Identifiers of the contract: never masked, or consumers could not join records on them.
ID_FIELDS = frozenset(
    {
        "type",
        "request_id",
        "root_request_id",
        "session_id",
        "session_key",
        "evaluation_id",
        "retry_id",
        "event_id",
        "task_id",
        "alert_id",
        "reflection_id",
        "decision_id",
        "evaluator_version",
        "agent_name",
        "agent_version",
        "agent",
        "judge_status",
        "judge_error",
        "closed_by",
        "response_type",
        "kind",
        "action",
    }
)


def mask_any(value: Any, keep: frozenset[str] = frozenset()) -> Any:
    """Mask every string inside nested lists and dicts, except the values of keys in `keep`."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, list):
        return [mask_any(v, keep) for v in value]
    if isinstance(value, dict):
        return {k: v if k in keep else mask_any(v, keep) for k, v in value.items()}
    return value


def masked_json(model: BaseModel) -> str:
    """A model as JSON with every free-text value masked (identifiers kept): the one form in
    which outputs leave the process (topics, Redis, the verdict cache)."""
    return json.dumps(
        mask_any(model.model_dump(mode="json"), ID_FIELDS),
        ensure_ascii=False,
        separators=(",", ":"),
    )
