"""Control records an agent can trust: HMAC-SHA256 signatures with keys the operator sets.

Anyone who can write to the control topic (or to Redis) could otherwise stop any agent: the
client checked only a record's key and schema. With keys set (`TRACEJUDGE_CONTROL_KEYS`,
comma-separated, on the worker and on every agent's client alike), the worker signs each
intervention and early-stop decision it publishes with the first key, and a reader acts on a
record only when one of its keys verifies it: a key rotates without downtime (add the new key
second everywhere, then put it first, then drop the old one). Without keys nothing is signed or
checked, as before, and both sides say so when they start.

What is signed is the record as published, less its `signature` field, in a canonical form
(keys sorted, no whitespace, UTF-8: `json.dumps(record, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)`), after the domain `tracejudge-control-v1` so a MAC made for anything else
never verifies here. It covers the request id, the record's id and its time: a record moved to
another request fails, and a reader drops one issued before the run it would stop began (a
replay from an earlier run of the same id); a record read twice is one record (its id).
Python's floats survive a JSON round trip exactly, so the reader's canonical form is the
writer's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SIGNATURE = "signature"  # the field that carries it
SCHEME = "hmac-sha256:"  # what it is, before the hex digest
DOMAIN = b"tracejudge-control-v1\n"
KEYS_ENV = "TRACEJUDGE_CONTROL_KEYS"
MIN_KEY_CHARS = 32  # e.g. `openssl rand -hex 32` (64 characters)


class ControlKeyError(ValueError):
    """A control key that would not protect anything."""


@dataclass(frozen=True)
class ControlKeys:
    """The first key signs; every key verifies."""

    keys: tuple[bytes, ...]

    @classmethod
    def parse(cls, text: str | None) -> ControlKeys | None:
        """Comma-separated keys; None when there are none (signing off)."""
        keys = [k.strip() for k in (text or "").split(",") if k.strip()]
        if not keys:
            return None
        short = [i + 1 for i, k in enumerate(keys) if len(k) < MIN_KEY_CHARS]
        if short:
            raise ControlKeyError(
                f"{KEYS_ENV}: key {', '.join(map(str, short))} is shorter than "
                f"{MIN_KEY_CHARS} characters; make one with `openssl rand -hex 32`"
            )
        return cls(tuple(k.encode("utf-8") for k in keys))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ControlKeys | None:
        return cls.parse((os.environ if environ is None else environ).get(KEYS_ENV))

    def sign(self, record: bytes) -> bytes:
        """`record` (a JSON object, as encoded for publishing) with its signature added."""
        raw = json.loads(record)
        if not isinstance(raw, dict):
            raise TypeError("only a JSON object is signed")
        raw.pop(SIGNATURE, None)
        raw[SIGNATURE] = SCHEME + _mac(self.keys[0], raw)
        return json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def verify(self, raw: Mapping[str, Any]) -> bool:
        """Whether a parsed record carries a signature one of the keys made."""
        signature = raw.get(SIGNATURE)
        if not isinstance(signature, str) or not signature.startswith(SCHEME):
            return False
        body = {k: v for k, v in raw.items() if k != SIGNATURE}
        given = signature[len(SCHEME) :]
        # every key tried, whichever matched: the time taken says nothing of which
        return sum(hmac.compare_digest(given, _mac(key, body)) for key in self.keys) > 0


def signed(record: bytes, keys: ControlKeys | None) -> bytes:
    """`record` signed with `keys`, or as it is without them."""
    return record if keys is None else keys.sign(record)


def _mac(key: bytes, body: Mapping[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hmac.new(key, DOMAIN + canonical.encode("utf-8"), hashlib.sha256).hexdigest()
