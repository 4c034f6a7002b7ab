from __future__ import annotations

import json
import logging

import pytest

from benchmarks.redaction import PII, evaluate
from tests.test_rules import trace, window_of
from tracejudge.judges.masking.redact import ID_FIELDS, mask, mask_any, masked_json
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.verdict.conclude import DISABLED, Policy, WindowFacts, conclude
from tracejudge.models.outputs import RetryRequest
from tracejudge.settings import Settings
from tracejudge.streams.shared.logs import mask_log_records

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


def test_the_labelled_corpus_meets_the_bars() -> None:
    report = evaluate()
    assert report.recall(pii=False) >= 0.99
    for kind in PII:
        assert report.kinds[kind].rate >= 0.95, (kind, report.kinds[kind].misses)
    assert report.false_positive_rate <= 0.01, {
        k: t.misses for k, t in report.lookalikes.items() if t.misses
    }


@pytest.mark.parametrize(
    "text",
    [
        "Visa 4111 1111 1111 1111 on file",
        "SSN 123-45-6789",
        "call +44 20 7946 0958 or (415) 867-5309",
        "身份证 11010519491231002X，手机 13800138000",
        "IBAN DE89 3704 0044 0532 0130 00",
        "postgres://app:s3cretpw@db:5432/orders",
        "redis://:hunter2hunter2@cache:6379/0",
    ],
)
def test_personal_data_and_passwords_in_urls_are_masked(text: str) -> None:
    masked = mask(text)
    assert "[REDACTED:" in masked
    for raw in (
        "4111",
        "6789",
        "7946",
        "5309",
        "1002X",
        "13800138000",
        "0130",
        "s3cretpw",
        "hunter2",
    ):
        assert raw not in masked


@pytest.mark.parametrize(
    "text",
    [
        "Order 4111 1111 1111 1112 (not a card: the Luhn check fails)",
        "ts_ms=1635144768050 and ts=1700000000",
        "request 5f0c1a8e-2b7d-4c61-9a3e-0d9b8f1e2a77",
        "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
        "v3.11.4, ¥3999.00, 2026-11-22T09:43:15Z, flight UA123",
        "git@github.com:org/repo.git and https://example.com:8443/path",
    ],
)
def test_look_alikes_stay(text: str) -> None:
    assert mask(text) == text


def test_masked_json_keeps_identifiers() -> None:
    retry = RetryRequest(
        retry_id="r-4111111111111111",
        session_id="s-ann@corp.example",
        request_id="req-13800138000",
        attempt=1,
        response_type="generic",
        detected_pattern="ann@corp.example said hi",
        reasons=["the answer was 4111 1111 1111 1111"],
        continue_prompt="Please continue",
        ts=0.0,
    )
    data = json.loads(masked_json(retry))
    assert {"retry_id", "session_id", "request_id"} <= ID_FIELDS
    assert data["session_id"] == "s-ann@corp.example" and data["request_id"] == "req-13800138000"
    assert "4111" not in data["reasons"][0] and "ann@corp" not in data["detected_pattern"]


def test_settings_are_logged_without_passwords() -> None:
    settings = Settings(
        redis_url="redis://default:hunter2hunter2@cache:6379/0",
        llm_api_key="sk-proj-abcdefghijklmnopqrstuvwxyz",
    )
    text = str(settings.masked())
    assert "hunter2" not in text and "abcdefghijklmnop" not in text
    assert "cache:6379" in text


def test_log_records_are_masked_with_their_arguments_and_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mask_log_records()
    log = logging.getLogger("tracejudge.test")
    with caplog.at_level(logging.INFO):
        log.info("user %s paid with %s", "ann@corp.example", "4111 1111 1111 1111")
        try:
            raise ValueError("bad token ghp_1234567890abcdefghijklmnopqrstuvwxyz")
        except ValueError:
            log.exception("failed")
    text = caplog.text
    assert "ann@corp.example" not in text and "4111 1111" not in text and "ghp_123" not in text
    assert "[REDACTED:email]" in text and "bad token [REDACTED:" in text


# Code, issue text and shell output that agents read and write (found by
# `benchmarks/masking.py` on real coding-agent runs, rewritten here as synthetic snippets of
# the same shapes): none of it carries a secret, so masking must leave it byte for byte.
@pytest.mark.parametrize(
    "text",
    [
        # a keyword assigned a code expression, not a literal
        '+    String password = credentials.substring(credentials.indexOf(":") + 1);',
        "    secret = vault.lookup(name)[0]",
        # a keyword whose value is a placeholder: its own name, empty, or a template
        "connect with user=user, password=password, namespace=namespace",
        "registry://10.0.0.1:8848?username=&password=&namespace=dev",
        'api_key: "{api_key}" and token=${TOKEN}',
        # a value clipped to almost nothing by a log clipper
        "        String password = c...[+731 chars]",
        # the shell's working directory, read or listed
        'docker run --rm -v "$PWD":/usr/src/app -w /usr/src/app maven:3 mvn test',
        "SHELL=/bin/bash\nPWD=/repo/project-core\nHOME=/root",
        # "basic" followed by an ordinary word
        "// 'auth' is a basic authentication token parsed by the caller",
        "Let's try a more basic approach: list the basic commands first.",
        "* Method for collecting basic information on all fields",
        # long numbers inside paths and identifiers
        "see https://ci.example.org/org/repo/actions/runs/6809930157/job/15887766554",
        "build id13912345678 in file cache/13912345678.tmp",
        # diffs, hashes, versions, line numbers
        "@@ -1385,7 +1385,8 @@ public class Parser {",
        "@@ -120,7 +4991,8 @@ class Parser {",
        "index 9fceb02d0a..3f0c1a8e2b 100644",
        "at com.example.Parser.parse(Parser.java:1385)",
        "sha256: 4f2a9c13912345678e0b7d9a3c6f1e2d5b8a7c9e0f1a2b3c4d5e6f7a8b9c0d1e",
        "<version>2.13.4.2</version> and long TIMEOUT = 13912345678L;",
    ],
)
def test_code_stays(text: str) -> None:
    assert mask(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "password = hunter2hunter2",
        "password = hunter2hunter2...[+20 chars]",
        '"password": "s3cr(et)Pass"',
        "Authorization: Basic YWRtaW46czNjcmV0UGFzcw==",
        "PASSWORD=hunter2hunter2",
        "pwd=hunter2hunter2",
        "请拨打13912345678联系我",
        "mobile: 13912345678",
        "?phone=13912345678&x=1",
    ],
)
def test_secrets_next_to_the_code_rules_are_still_masked(text: str) -> None:
    masked = mask(text)
    for raw in ("hunter2", "s3cr(et)", "YWRtaW46", "13912345678"):
        assert raw not in masked
