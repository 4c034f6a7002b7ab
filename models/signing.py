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
import re
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
        """Whether a parsed record carries a signature one of the keys made. Only ever yes or
        no: a record that cannot be checked (a signature that is no hex digest, a text that
        cannot be encoded) is a no, never an exception in the reader's thread."""
        given = _digest_of(raw)
        if given is None:
            return False
        try:
            body = {k: v for k, v in raw.items() if k != SIGNATURE}
            # every key tried, whichever matched: the time taken says nothing of which
            return sum(hmac.compare_digest(given, _mac(key, body)) for key in self.keys) > 0
        except Exception:  # what cannot be checked is not trusted
            return False


OUTCOME_DOMAIN = b"tracejudge-outcome-v1\n"
OUTCOME_KEYS_ENV = "TRACEJUDGE_OUTCOME_KEYS"


@dataclass(frozen=True)
class OutcomeKeys:
    """Outcomes accepted only from the sources the operator names, each with its own key
    (`TRACEJUDGE_OUTCOME_KEYS`: `source:key,source:key`): a source signs its outcome events
    (`sign_outcome`), and the worker joins one only when its `source` is named and that
    source's key verifies it. A leaked key speaks for its own source only."""

    keys: Mapping[str, bytes]

    @classmethod
    def parse(cls, text: str | None) -> OutcomeKeys | None:
        pairs = [p.strip() for p in (text or "").split(",") if p.strip()]
        if not pairs:
            return None
        keys: dict[str, bytes] = {}
        for i, pair in enumerate(pairs, 1):
            source, colon, key = pair.partition(":")
            if not colon or not source.strip():
                raise ControlKeyError(f"{OUTCOME_KEYS_ENV}: entry {i} is not `source:key`")
            if len(key.strip()) < MIN_KEY_CHARS:
                raise ControlKeyError(
                    f"{OUTCOME_KEYS_ENV}: the key of {source.strip()!r} is shorter than "
                    f"{MIN_KEY_CHARS} characters; make one with `openssl rand -hex 32`"
                )
            keys[source.strip()] = key.strip().encode("utf-8")
        return cls(keys)

    def verify(self, raw: Mapping[str, Any]) -> bool:
        """Whether an outcome event (parsed as sent) comes from a named source, signed with
        its key."""
        key = self.keys.get(str(raw.get("source", "user")))
        given = _digest_of(raw)
        if key is None or given is None:
            return False
        try:
            body = {k: v for k, v in raw.items() if k != SIGNATURE}
            return hmac.compare_digest(given, _mac(key, body, OUTCOME_DOMAIN))
        except Exception:  # what cannot be checked is not trusted: a no, never a traceback
            return False


def sign_outcome(event: Mapping[str, Any], key: str) -> dict[str, Any]:
    """An outcome event as it will be sent, with the signature of its source's key."""
    body = {k: v for k, v in event.items() if k != SIGNATURE}
    return {**body, SIGNATURE: SCHEME + _mac(key.encode("utf-8"), body, OUTCOME_DOMAIN)}


def signed(record: bytes, keys: ControlKeys | None) -> bytes:
    """`record` signed with `keys`, or as it is without them."""
    return record if keys is None else keys.sign(record)


_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def _digest_of(raw: Mapping[str, Any]) -> str | None:
    """The hex digest a record's signature claims, when it is one (ASCII, 64 hex digits):
    anything else is no signature, before it reaches `hmac.compare_digest`, which raises on
    text that is not ASCII."""
    signature = raw.get(SIGNATURE)
    if not isinstance(signature, str) or not signature.startswith(SCHEME):
        return None
    given = signature[len(SCHEME) :]
    return given if _HEX_DIGEST.fullmatch(given) else None


def _mac(key: bytes, body: Mapping[str, Any], domain: bytes = DOMAIN) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hmac.new(key, domain + canonical.encode("utf-8"), hashlib.sha256).hexdigest()
