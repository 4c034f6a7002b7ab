"""Every HTTP listener answers only the Host names it serves (DNS rebinding reads nothing), puts
its security headers on every answer (errors and redirects too), and redirects only within its
own origin; a guessable explorer token stops the start."""

from __future__ import annotations

import pytest

from tests.test_explorer import client_for, settings
from tracejudge.models.errors import ConfigurationError
from tracejudge.streams.explorer.server import check_exposure
from tracejudge.streams.explorer.store import VerdictStore
from tracejudge.streams.shared.web_guard import host_allowed, host_names

TOKEN = "a-long-random-token-0123456789"
SECURITY = ("Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy")


@pytest.mark.parametrize(
    ("header", "configured", "allowed"),
    [
        ("127.0.0.1:8090", "", True),
        ("[::1]:8090", "", True),
        ("10.1.2.3", "", True),  # a pod's address, as a probe or a scraper sends it
        ("localhost:8090", "", True),
        ("LOCALHOST.", "", True),
        ("attacker.example", "", False),
        ("attacker.example:8090", "", False),
        ("127.0.0.1.attacker.example", "", False),
        ("ui.example.com:443", "ui.example.com", True),
        ("UI.Example.Com.", " ui.example.com ,other", True),
        ("anything.example", "*", True),
        (None, "", True),  # HTTP/1.0 without a Host: not a browser
    ],
)
def test_host_names_served(header: str | None, configured: str, allowed: bool) -> None:
    assert host_allowed(header, host_names(configured)) is allowed


async def test_the_explorer_refuses_a_host_it_does_not_serve_with_its_headers() -> None:
    store = VerdictStore(capacity=10)
    client = await client_for(store)
    try:
        refused = await client.get("/", headers={"Host": "attacker.example"})
        assert refused.status == 421 and "TRACEJUDGE_ALLOWED_HOSTS" in await refused.text()
        assert all(h in refused.headers for h in SECURITY)
        health = await client.get("/health", headers={"Host": "attacker.example"})
        assert health.status == 421  # not even the counts
        assert (await client.get("/", headers={"Host": "localhost:8090"})).status == 200
    finally:
        await client.close()
    named = await client_for(store, allowed_hosts="tracejudge.internal")
    try:
        ok = await named.get("/", headers={"Host": "tracejudge.internal"})
        assert ok.status == 200
    finally:
        await named.close()


async def test_errors_and_redirects_carry_the_security_headers_and_stay_on_the_origin() -> None:
    client = await client_for(VerdictStore(capacity=10), ui_token=TOKEN)
    try:
        unauthorized = await client.get("/")
        missing = await client.get("/no-such-page", headers={"Authorization": f"Bearer {TOKEN}"})
        base = f"http://127.0.0.1:{client.port}"  # a path that starts with two slashes, as sent
        offsite = await client.session.get(
            f"{base}//evil.example/x?token={TOKEN}&a=1", allow_redirects=False
        )
        for answer, status in ((unauthorized, 401), (missing, 404), (offsite, 303)):
            assert answer.status == status
            assert all(h in answer.headers for h in SECURITY), (status, answer.headers)
            assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
        location = offsite.headers["Location"]
        assert location.startswith("/") and not location.startswith("//"), location
        assert "\\" not in location and "token" not in location and "a=1" in location
        backslash = await client.session.get(
            f"{base}/\\evil.example/x?token={TOKEN}", allow_redirects=False
        )
        assert backslash.headers["Location"].startswith("/evil.example")
    finally:
        await client.close()


@pytest.mark.parametrize("token", ["change-me", "s3cret", "CHANGEME-but-16ch"[:8], "password"])
def test_a_guessable_explorer_token_stops_the_start(token: str) -> None:
    with pytest.raises(ConfigurationError, match="placeholder or shorter than 16"):
        check_exposure(settings(ui_host="0.0.0.0", ui_token=token))
    with pytest.raises(ConfigurationError):  # on loopback too: it would still be taken
        check_exposure(settings(ui_token=token))
    check_exposure(settings(ui_host="0.0.0.0", ui_token=TOKEN))
