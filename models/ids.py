"""Deterministic ids: the same inputs always give the same id, so consumers drop duplicates."""

from __future__ import annotations

import hashlib


def stable_id(*parts: str) -> str:
    """32 hex characters of a hash of the parts."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]
