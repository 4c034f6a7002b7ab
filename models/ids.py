"""Deterministic ids: the same inputs always give the same id, so consumers drop duplicates."""

from __future__ import annotations

import hashlib


def stable_id(*parts: str) -> str:
    """32 hex characters of a hash of the parts."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def intervention_id(request_id: str, kind: str, action: str, crossed: str, nth: int = 1) -> str:
    """An intervention's id, the same whoever computes it (the worker that sends it, the judges
    that read what a run was sent): a budget's and a loop's stop are at most one per run; a
    loop's steers are per rule and counted; a team's check is one per check and run."""
    if kind == "loop" and action == "steer":
        return stable_id("intervention", request_id, "loop", "steer", crossed, str(nth))
    if kind == "check":
        return stable_id("intervention", request_id, "check", crossed)
    return stable_id("intervention", request_id, kind)
