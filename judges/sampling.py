"""Deterministic sampling: the same request id is always in, or always out."""

from __future__ import annotations

import hashlib


def sampled(request_id: str, rate: float) -> bool:
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    bucket = int.from_bytes(hashlib.sha256(request_id.encode("utf-8")).digest()[:8], "big")
    return bucket / 2**64 < rate
