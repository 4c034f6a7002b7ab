from __future__ import annotations

import pytest

from tests.test_rules import trace, window_of
from tracejudge.judges.redact import mask, mask_any
from tracejudge.judges.rules import RuleJudge
from tracejudge.judges.verdicts import DISABLED, Policy, WindowFacts, conclude

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
KEY_BLOCK = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234567890abcdef\n"
    "-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("secret", "kind"),
    [
        ("sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz012345", "api_key"),
        ("Authorization: Bearer abc.def-ghi_jkl012345", "bearer"),
        ("AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret"),
        ("ghp_1234567890abcdefghijklmnopqrstuvwxyz", "github_token"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_token"),
        ("xoxb-123456789012-abcdefghijkl", "slack_token"),
        (JWT, "jwt"),
        (KEY_BLOCK, "private_key"),
        ("mia.li@example.com", "email"),
        ('{"api_key": "q8w7e6r5t4y3"}', "api_key"),
        ("password=hunter2hunter2", "api_key"),
    ],
)
def test_each_kind_of_secret_is_masked(secret: str, kind: str) -> None:
    text = f"before {secret} after"
    masked = mask(text)
    assert f"[REDACTED:{kind}]" in masked
    assert masked.startswith("before ") and masked.endswith(" after")
    core = secret.split()[-1].strip('"}')
    assert core not in masked


def test_ordinary_text_is_left_alone() -> None:
    text = "Booked UA123 for $320, reservation ABC123, seat 14C; 3 tokens left in the task key."
    assert mask(text) == text
    assert mask_any({"a": [text, 3, None]}) == {"a": [text, 3, None]}


def test_evaluations_and_reflections_carry_no_secrets() -> None:
    events = trace(
        "Done, but the deploy key sk-live-ABCDEFGHIJKLMNOPQRSTUV still needs to be "
        "rotated by ops@corp.example.",
        [("deploy", False)],
    )
    events[0]["goal"] = "Deploy with token ghp_1234567890abcdefghijklmnopqrstuvwxyz"
    events[1]["error"] = "auth failed for Bearer abcdefghijklmnop"
    window = window_of(events)
    decision = conclude(
        WindowFacts.of(window), RuleJudge().judge(window), DISABLED, Policy(), "v", 0.0
    )
    assert decision.reflection is not None
    text = decision.evaluation.model_dump_json() + decision.reflection.model_dump_json()
    for secret in ("sk-live-ABC", "ops@corp.example", "ghp_123", "Bearer abcdefghijklmnop"):
        assert secret not in text
    assert "[REDACTED:" in decision.reflection.goal
