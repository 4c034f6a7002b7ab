"""Control records an agent can trust: signatures with keys the operator sets.

Anyone who can write to the control topic (or to Redis) could otherwise stop any agent: the
client checked only a record's key and schema. With keys set (`TRACEJUDGE_CONTROL_KEYS`,
comma-separated entries, on the worker and on every agent's client), the worker signs each
intervention and early-stop decision it publishes, and a reader acts on a record only when one
of its keys verifies it. Without keys nothing is signed or checked, as before, and both sides
say so when they start.

Three kinds of entry:
- `ed25519-private:KID:B64` on the worker and `ed25519:KID:B64[@YYYY-MM-DD]` on the agents
  (`tracejudge keys`): the worker signs with its private key, an agent only verifies, so no
  agent host can make a record another agent obeys;
- `hmac:KID:SECRET[@YYYY-MM-DD]` (`tracejudge keys --hmac`), the same entry on both sides;
- a bare secret (32 characters or more): HMAC as first shipped, its records bound to the key
  only.
A key with an id is named in its records' signature (`ed25519:KID:B64`, `hmac-sha256:KID:HEX`)
and only that key is tried; it is refused after its date; and what it signs is bound to the
deployment: the domain `tracejudge-control-v2`, the topic prefix and the key id before the
record, so a record of staging never verifies in production even where both share a key.
A bare key signs `hmac-sha256:HEX` over the domain `tracejudge-control-v1` and the record. The
first entry that can sign does (the Ed25519 private key before any HMAC key); every entry
verifies, so keys rotate without downtime (add the new key second everywhere, then put it
first, then drop the old one).

The record is signed as published, less its `signature` field, in a canonical form (keys
sorted, no whitespace, UTF-8: `json.dumps(record, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)`). It covers the request id, the record's id, its time and the run's nonce:
a record moved to another request fails, a reader drops one issued before the run it would
stop began or made for another run of the same id (its `run_nonce`), and a record read twice
is one record (its id). Python's floats survive a JSON round trip exactly, so the reader's
canonical form is the writer's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from typing import Any

SIGNATURE = "signature"  # the field that carries it
SCHEME = "hmac-sha256:"  # what it is, before the hex digest
DOMAIN = b"tracejudge-control-v1\n"
KEYS_ENV = "TRACEJUDGE_CONTROL_KEYS"
MIN_KEY_CHARS = 32  # e.g. `openssl rand -hex 32` (64 characters)


class ControlKeyError(ValueError):
    """A control key that would not protect anything."""


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 key that verifies control records, by id, until its last day (if set)."""

    kid: str
    key: Any  # cryptography's Ed25519PublicKey
    not_after: date | None = None


@dataclass(frozen=True)
class MacKey:
    """A shared HMAC key. With an id (`hmac:KID:SECRET[@DATE]`), its records name it and are
    bound to the deployment, and it is refused after its date; without (a bare secret, as
    first configured), its records are of the first scheme, bound to nothing but the key."""

    secret: bytes
    kid: str = ""
    not_after: date | None = None


@dataclass(frozen=True)
class ControlKeys:
    """What signs and verifies control records (the module's docstring says how)."""

    macs: tuple[MacKey, ...] = ()  # HMAC keys, in order: the first signs (without Ed25519)
    private: Any = None  # cryptography's Ed25519PrivateKey: this side signs with it
    private_kid: str = ""
    public: tuple[PublicKey, ...] = ()
    # the deployment (its topic prefix) an Ed25519 signature is bound to: a record of staging
    # never verifies in production, even where both share a key pair
    deployment: str = ""

    def for_deployment(self, topic_prefix: str) -> ControlKeys:
        return replace(self, deployment=topic_prefix)

    @classmethod
    def parse(cls, text: str | None) -> ControlKeys | None:
        """Comma-separated entries; None when there are none (signing off)."""
        entries = [k.strip() for k in (text or "").split(",") if k.strip()]
        if not entries:
            return None
        macs: list[MacKey] = []
        private, private_kid, public = None, "", []
        for i, entry in enumerate(entries, 1):
            if entry.startswith(ED25519_PRIVATE):
                if private is not None:
                    raise ControlKeyError(f"{KEYS_ENV}: entry {i}: one private key signs")
                private_kid, private = _private_key(entry, i)
                public.append(PublicKey(private_kid, private.public_key()))
            elif entry.startswith(ED25519):
                public.append(_public_key(entry, i))
            else:
                macs.append(_mac_key(entry, i))
        return cls(tuple(macs), private, private_kid, tuple(public))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ControlKeys | None:
        return cls.parse((os.environ if environ is None else environ).get(KEYS_ENV))

    @property
    def keys(self) -> tuple[bytes, ...]:
        """The HMAC secrets, in order."""
        return tuple(m.secret for m in self.macs)

    @property
    def scheme(self) -> str:
        """How this side signs: `ed25519`, `hmac`, or `none` (it only verifies)."""
        return "ed25519" if self.private is not None else "hmac" if self.macs else "none"

    @property
    def can_sign(self) -> bool:
        return self.private is not None or bool(self.macs)

    def sign(self, record: bytes) -> bytes:
        """`record` (a JSON object, as encoded for publishing) with its signature added: with
        the Ed25519 private key when there is one, else the first HMAC key."""
        raw = json.loads(record)
        if not isinstance(raw, dict):
            raise TypeError("only a JSON object is signed")
        raw.pop(SIGNATURE, None)
        if self.private is not None:
            signature = self.private.sign(_signed_text(raw, self.private_kid, self.deployment))
            raw[SIGNATURE] = f"{ED25519}{self.private_kid}:{_b64(signature)}"
        elif self.macs:
            first = self.macs[0]
            if first.kid:
                text = _signed_text(raw, first.kid, self.deployment)
                digest = hmac.new(first.secret, text, hashlib.sha256).hexdigest()
                raw[SIGNATURE] = f"{SCHEME}{first.kid}:{digest}"
            else:
                raw[SIGNATURE] = SCHEME + _mac(first.secret, raw)
        else:
            raise ControlKeyError(f"{KEYS_ENV}: public keys verify, they cannot sign")
        return json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def verify(self, raw: Mapping[str, Any], today: date | None = None) -> bool:
        """Whether a parsed record carries a signature one of the keys made. Only ever yes or
        no: a record that cannot be checked (a signature that is no hex digest, a text that
        cannot be encoded, an unknown or expired key id) is a no, never an exception in the
        reader's thread."""
        try:
            signature = raw.get(SIGNATURE)
            if isinstance(signature, str) and signature.startswith(ED25519):
                return self._verify_ed25519(raw, signature, today)
            return self._verify_hmac(raw, today)
        except Exception:  # what cannot be checked is not trusted
            return False

    @property
    def signing_key(self) -> str | None:
        """The key this side signs with, as records name it (`ed25519:KID`, `hmac:KID`, or
        `hmac` for a bare key); None when it only verifies. Never the secret."""
        if self.private is not None:
            return f"ed25519:{self.private_kid}"
        if self.macs:
            return f"hmac:{self.macs[0].kid}" if self.macs[0].kid else "hmac"
        return None

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key this side verifies with, as records name them."""
        return tuple(f"ed25519:{k.kid}" for k in self.public) + tuple(
            f"hmac:{m.kid}" if m.kid else "hmac" for m in self.macs
        )

    def why_not(self, raw: Mapping[str, Any], today: date | None = None) -> str:
        """Why a record `verify` refused was refused, in one word an operator can act on:
        `unsigned`, `unknown_key` (signed with a key this side does not hold: another
        deployment's, or a key never given to it), `expired_key`, or `bad_signature` (a key
        it holds, a signature that key did not make: a changed record, another deployment's
        signature, or a forger)."""
        named = signed_with(raw)
        if named is None:
            return "unsigned"
        if named not in self.key_ids:
            return "unknown_key"
        day = today or datetime.now(UTC).date()
        kid = named.partition(":")[2]
        dates = [k.not_after for k in self.public if named.startswith(ED25519) and k.kid == kid]
        dates += [m.not_after for m in self.macs if not named.startswith(ED25519) and m.kid == kid]
        if dates and all(d is not None and day > d for d in dates):
            return "expired_key"
        return "bad_signature"

    def _verify_hmac(self, raw: Mapping[str, Any], today: date | None) -> bool:
        claimed = _claimed_mac(raw)
        if claimed is None:
            return False
        kid, given = claimed
        day = today or datetime.now(UTC).date()
        # a record names its key's id (a bare key's records name none): only that key is
        # tried, and not after its last day
        keys = [
            m for m in self.macs if m.kid == kid and (m.not_after is None or day <= m.not_after)
        ]
        if not keys:
            return False
        body = {k: v for k, v in raw.items() if k != SIGNATURE}
        text = _signed_text(body, kid, self.deployment) if kid else None
        expected = [
            hmac.new(m.secret, text, hashlib.sha256).hexdigest()
            if text is not None
            else _mac(m.secret, body)
            for m in keys
        ]
        # every key tried, whichever matched: the time taken says nothing of which
        return sum(hmac.compare_digest(given, e) for e in expected) > 0

    def _verify_ed25519(self, raw: Mapping[str, Any], signature: str, today: date | None) -> bool:
        kid, colon, encoded = signature[len(ED25519) :].partition(":")
        key = next((k for k in self.public if k.kid == kid), None)
        if not colon or key is None:
            return False
        if key.not_after is not None and (today or datetime.now(UTC).date()) > key.not_after:
            return False
        body = {k: v for k, v in raw.items() if k != SIGNATURE}
        try:
            key.key.verify(
                base64.b64decode(encoded, validate=True),
                _signed_text(body, kid, self.deployment),
            )
        except Exception:  # InvalidSignature, or bytes that are no signature
            return False
        return True


ED25519 = "ed25519:"
HMAC_ID = "hmac:"
ED25519_PRIVATE = "ed25519-private:"
DOMAIN_V2 = b"tracejudge-control-v2\n"


def _signed_text(body: Mapping[str, Any], kid: str, deployment: str) -> bytes:
    """What an Ed25519 signature covers: the domain, the deployment (its topic prefix), the key
    id, the canonical record."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    head = f"{deployment}\n{kid}\n".encode()
    return DOMAIN_V2 + head + canonical.encode("utf-8")


_DAY = re.compile(r"@(\d{4}-\d{2}-\d{2})$")


def _mac_key(entry: str, i: int) -> MacKey:
    """`hmac:KID:SECRET[@YYYY-MM-DD]`, or a bare secret."""
    kid, not_after = "", None
    if entry.startswith(HMAC_ID):
        kid, colon, entry = entry[len(HMAC_ID) :].partition(":")
        if not colon:
            raise ControlKeyError(f"{KEYS_ENV}: entry {i}: `hmac:KID:SECRET[@YYYY-MM-DD]`")
        kid = _kid(kid, i)
        day = _DAY.search(entry)
        if day is not None:
            try:
                not_after = date.fromisoformat(day.group(1))
            except ValueError as exc:
                raise ControlKeyError(f"{KEYS_ENV}: entry {i}: no such day {day.group(1)}") from exc
            entry = entry[: day.start()]
    if len(entry) < MIN_KEY_CHARS:
        raise ControlKeyError(
            f"{KEYS_ENV}: key {i} is shorter than "
            f"{MIN_KEY_CHARS} characters; make one with `openssl rand -hex 32`"
        )
    return MacKey(entry.encode("utf-8"), kid, not_after)


def new_mac_key(kid: str) -> str:
    """A fresh HMAC key with an id, as a `TRACEJUDGE_CONTROL_KEYS` entry (the same on the
    worker and on the agents)."""
    return f"{HMAC_ID}{_kid(kid, 1)}:{os.urandom(32).hex()}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _ed25519() -> Any:
    """cryptography's Ed25519, imported when a key needs it (`pip install
    'tracejudge[signing]'`): the client stays light for those who sign nothing."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ModuleNotFoundError as exc:
        raise ControlKeyError(
            f"{KEYS_ENV}: Ed25519 keys need the `cryptography` package: "
            "pip install 'tracejudge[signing]'"
        ) from exc
    return ed25519


_KID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _kid(kid: str, i: int) -> str:
    if not _KID.fullmatch(kid):
        raise ControlKeyError(f"{KEYS_ENV}: entry {i}: a key id is 1-64 of A-Z a-z 0-9 _ . -")
    return kid


def _key_bytes(encoded: str, i: int) -> bytes:
    try:
        data = base64.b64decode(encoded, validate=True)
    except ValueError as exc:
        raise ControlKeyError(f"{KEYS_ENV}: entry {i}: the key is not base64") from exc
    if len(data) != 32:
        raise ControlKeyError(f"{KEYS_ENV}: entry {i}: an Ed25519 key is 32 bytes")
    return data


def _private_key(entry: str, i: int) -> tuple[str, Any]:
    kid, _, encoded = entry[len(ED25519_PRIVATE) :].partition(":")
    raw = _key_bytes(encoded, i)
    return _kid(kid, i), _ed25519().Ed25519PrivateKey.from_private_bytes(raw)


def _public_key(entry: str, i: int) -> PublicKey:
    kid, _, rest = entry[len(ED25519) :].partition(":")
    encoded, at, day = rest.partition("@")
    not_after = None
    if at:
        try:
            not_after = date.fromisoformat(day)
        except ValueError as exc:
            raise ControlKeyError(f"{KEYS_ENV}: entry {i}: `@YYYY-MM-DD` after the key") from exc
    key = _ed25519().Ed25519PublicKey.from_public_bytes(_key_bytes(encoded, i))
    return PublicKey(_kid(kid, i), key, not_after)


def new_key_pair(kid: str) -> tuple[str, str]:
    """A fresh Ed25519 pair as `TRACEJUDGE_CONTROL_KEYS` entries: (the worker's private one,
    the agents' public one)."""
    serialization = __import__(
        "cryptography.hazmat.primitives.serialization", fromlist=["Encoding"]
    )
    private = _ed25519().Ed25519PrivateKey.generate()
    raw_private = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    raw_public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    kid = _kid(kid, 1)
    return f"{ED25519_PRIVATE}{kid}:{_b64(raw_private)}", f"{ED25519}{kid}:{_b64(raw_public)}"


SIGNED_ONLY_ENV = "TRACEJUDGE_CONTROL_SIGNED_ONLY"


def control_key_set(
    text: str | None = None, environ: Mapping[str, str] | None = None
) -> ControlKeys | None:
    """An agent's keys: `text` (else `TRACEJUDGE_CONTROL_KEYS`). With
    `TRACEJUDGE_CONTROL_SIGNED_ONLY=true` and no keys, a set that verifies nothing: a client
    whose keys went missing then acts on no control record, instead of on any (a forged stop
    among them); None otherwise, when there are no keys."""
    env = os.environ if environ is None else environ
    keys = ControlKeys.parse(env.get(KEYS_ENV) if text is None else text)
    if keys is None and env.get(SIGNED_ONLY_ENV, "").strip().lower() in ("1", "true", "yes"):
        return ControlKeys()
    return keys


OUTCOME_DOMAIN = b"tracejudge-outcome-v1\n"
OUTCOME_KEYS_ENV = "TRACEJUDGE_OUTCOME_KEYS"


@dataclass(frozen=True)
class OutcomeKeys:
    """Outcomes accepted only from the sources the operator names, each with its own key
    (`TRACEJUDGE_OUTCOME_KEYS`: `source:key,source:key`): a source signs its outcome events
    (`sign_outcome`), and the worker joins one only when its `source` is named and one of that
    source's keys verifies it. A source named twice has two keys, both verifying (`ci:NEW,
    ci:OLD` while the source moves to its new key). A leaked key speaks for its own source
    only."""

    keys: Mapping[str, tuple[bytes, ...]]

    @classmethod
    def parse(cls, text: str | None) -> OutcomeKeys | None:
        pairs = [p.strip() for p in (text or "").split(",") if p.strip()]
        if not pairs:
            return None
        keys: dict[str, tuple[bytes, ...]] = {}
        for i, pair in enumerate(pairs, 1):
            source, colon, key = pair.partition(":")
            if not colon or not source.strip():
                raise ControlKeyError(f"{OUTCOME_KEYS_ENV}: entry {i} is not `source:key`")
            if len(key.strip()) < MIN_KEY_CHARS:
                raise ControlKeyError(
                    f"{OUTCOME_KEYS_ENV}: the key of {source.strip()!r} is shorter than "
                    f"{MIN_KEY_CHARS} characters; make one with `openssl rand -hex 32`"
                )
            name = source.strip()
            keys[name] = (*keys.get(name, ()), key.strip().encode("utf-8"))
        return cls(keys)

    def verify(self, raw: Mapping[str, Any]) -> bool:
        """Whether an outcome event (parsed as sent) comes from a named source, signed with
        one of its keys. Only ever yes or no."""
        keys = self.keys.get(str(raw.get("source", "user")), ())
        claimed = _claimed_mac(raw)  # an outcome key has no id: a bare key's signature
        given = claimed[1] if claimed is not None and not claimed[0] else None
        if not keys or given is None:
            return False
        try:
            body = {k: v for k, v in raw.items() if k != SIGNATURE}
            return (
                sum(hmac.compare_digest(given, _mac(key, body, OUTCOME_DOMAIN)) for key in keys) > 0
            )
        except Exception:  # what cannot be checked is not trusted: a no, never a traceback
            return False


def sign_outcome(event: Mapping[str, Any], key: str) -> dict[str, Any]:
    """An outcome event as it will be sent, with the signature of its source's key."""
    body = {k: v for k, v in event.items() if k != SIGNATURE}
    return {**body, SIGNATURE: SCHEME + _mac(key.encode("utf-8"), body, OUTCOME_DOMAIN)}


def signed(record: bytes, keys: ControlKeys | None) -> bytes:
    """`record` signed with `keys`, or as it is without them."""
    return record if keys is None else keys.sign(record)


_KID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_KID_DIGEST = re.compile(r"(?:([A-Za-z0-9_.-]{1,64}):)?([0-9a-f]{64})")


def signed_with(raw: Mapping[str, Any]) -> str | None:
    """The key a record says it was signed with (`ed25519:KID`, `hmac:KID`, `hmac`), read from
    its signature without checking it; None for a record with no signature, `unknown` for a
    signature of no shape this version knows."""
    signature = raw.get(SIGNATURE)
    if not isinstance(signature, str) or not signature:
        return None
    if signature.startswith(ED25519):
        kid, colon, _ = signature[len(ED25519) : len(ED25519) + 66].partition(":")
        # the id is the record's text: only a well-formed one is repeated (in logs, counts)
        return f"ed25519:{kid}" if colon and _KID.fullmatch(kid) else "unknown"
    claimed = _claimed_mac(raw)
    if claimed is None:
        return "unknown"
    return f"hmac:{claimed[0]}" if claimed[0] else "hmac"


def _claimed_mac(raw: Mapping[str, Any]) -> tuple[str, str] | None:
    """(key id, hex digest) a control record's HMAC signature claims (`hmac-sha256:[KID:]HEX`,
    the id empty for a bare key); None for anything else, before `compare_digest` sees it."""
    signature = raw.get(SIGNATURE)
    if not isinstance(signature, str) or not signature.startswith(SCHEME):
        return None
    found = _KID_DIGEST.fullmatch(signature[len(SCHEME) :])
    return None if found is None else (found.group(1) or "", found.group(2))


def _mac(key: bytes, body: Mapping[str, Any], domain: bytes = DOMAIN) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hmac.new(key, domain + canonical.encode("utf-8"), hashlib.sha256).hexdigest()
