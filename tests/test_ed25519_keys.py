"""Ed25519 control keys: the worker signs, an agent verifies with the public key only; a key id
names the key, a date ends it; what cannot be parsed stops the start."""

from __future__ import annotations

import json
from datetime import date

import pytest

from tracejudge.models.errors import ConfigurationError
from tracejudge.models.signing import ControlKeyError, ControlKeys, new_key_pair
from tracejudge.settings import Settings

RECORD = {"type": "intervention", "request_id": "r", "intervention_id": "i", "ts": 1.0}


def test_a_record_the_private_key_signed_verifies_with_the_public_key_alone() -> None:
    private, public = new_key_pair("k1")
    worker, agent = ControlKeys.parse(private), ControlKeys.parse(public)
    assert worker is not None and agent is not None
    signed = json.loads(worker.sign(json.dumps(RECORD).encode()))
    assert signed["signature"].startswith("ed25519:k1:") and agent.verify(signed)
    assert not agent.verify({**signed, "request_id": "another"})  # moved
    assert not agent.verify({**signed, "signature": signed["signature"].replace("k1", "k2")})
    other = ControlKeys.parse(new_key_pair("k1")[0])
    assert other is not None
    assert not agent.verify(json.loads(other.sign(json.dumps(RECORD).encode())))
    with pytest.raises(ControlKeyError, match="cannot sign"):
        agent.sign(json.dumps(RECORD).encode())


def test_a_public_key_is_refused_after_its_date_and_rotation_keeps_both() -> None:
    old_private, old_public = new_key_pair("old")
    _, new_public = new_key_pair("new")
    agent = ControlKeys.parse(f"{new_public},{old_public}@2027-06-30")
    worker = ControlKeys.parse(old_private)
    assert agent is not None and worker is not None
    signed = json.loads(worker.sign(json.dumps(RECORD).encode()))
    assert agent.verify(signed, today=date(2027, 6, 30))
    assert not agent.verify(signed, today=date(2027, 7, 1))


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("ed25519:k1:not-base64!", "not base64"),
        ("ed25519:k1:AAAA", "32 bytes"),
        ("ed25519:has space:" + "A" * 43 + "=", "key id"),
        ("ed25519:k1:" + "A" * 43 + "=@someday", "YYYY-MM-DD"),
    ],
)
def test_a_key_that_cannot_be_read_says_why(entry: str, says: str) -> None:
    with pytest.raises(ControlKeyError, match=says):
        ControlKeys.parse(entry)


def test_a_worker_given_public_keys_only_does_not_start() -> None:
    _, public = new_key_pair("k1")
    settings = Settings.model_validate({"redis_url": "", "control_keys": public})
    with pytest.raises(ConfigurationError, match="public keys only"):
        settings.signing_keys("tracejudge.")
    private, _ = new_key_pair("k1")
    worker = Settings.model_validate({"redis_url": "", "control_keys": private})
    keys = worker.signing_keys("tracejudge.")
    assert keys is not None and keys.can_sign


def test_a_record_of_one_deployment_never_verifies_in_another() -> None:
    """Staging and production sharing a key pair: the topic prefix is in what is signed."""
    private, public = new_key_pair("shared")
    staging = ControlKeys.parse(private)
    agent = ControlKeys.parse(public)
    assert staging is not None and agent is not None
    signed = json.loads(staging.for_deployment("staging.").sign(json.dumps(RECORD).encode()))
    assert agent.for_deployment("staging.").verify(signed)
    assert not agent.for_deployment("prod.").verify(signed)
