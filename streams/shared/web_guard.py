"""What every HTTP listener of ours answers, and to whom: the explorer, the worker's pages and
the OTLP receiver.

A listener on loopback is still reachable from any page in the operator's browser through DNS
rebinding: the page's own name (`attacker.example`) made to resolve to 127.0.0.1, its requests
then carry `Host: attacker.example` and read the answers as same-origin. So a listener answers
only Host names it serves: IP addresses (a rebinding page never names one), `localhost`, and the
names the operator lists in `TRACEJUDGE_ALLOWED_HOSTS` (a Service's or an ingress's name; `*`:
any). Everything else gets 421, and every answer, errors and redirects included, carries the
headers that keep it from being sniffed, framed or cached.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web

from tracejudge.models.errors import ConfigurationError

# for answers that are not the explorer's pages (which add their own Content-Security-Policy)
PLAIN_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


MIN_TOKEN_CHARS = 16
# the values examples and tutorials ship: never a token
PLACEHOLDERS = frozenset(
    {"change-me", "changeme", "change_me", "secret", "token", "password", "example", "xxx"}
)


def guessable(token: str) -> bool:
    """A token anyone could guess: a placeholder, or too short to be random enough."""
    return len(token) < MIN_TOKEN_CHARS or token.lower() in PLACEHOLDERS


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token_setting: str, token: str, host_setting: str, host: str) -> None:
    """A listener's token: none on loopback is fine, none beyond it or a guessable one stops
    the start (ConfigurationError naming the settings)."""
    if token and guessable(token):
        raise ConfigurationError(
            f"{token_setting} is a placeholder or shorter than {MIN_TOKEN_CHARS} characters: "
            "anyone could guess it; make one with `openssl rand -hex 24`"
        )
    if not token and not loopback(host):
        raise ConfigurationError(
            f"{host_setting}={host} is not a loopback address: set {token_setting} too (or "
            "keep it on 127.0.0.1)"
        )


def tokens_match(given: str, token: str) -> bool:
    """Whether a token given in a request is the one set, in constant time; only ever yes or
    no: a header that is not UTF-8 (aiohttp hands its bytes on as surrogates) is a no, not a
    500 and a traceback per request."""
    if not given or not token:
        return False
    try:
        return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))
    except (UnicodeError, TypeError):
        return False


def host_names(configured: str) -> frozenset[str]:
    """The names of TRACEJUDGE_ALLOWED_HOSTS (comma-separated), normalised."""
    return frozenset(_normal(n) for n in configured.split(",") if n.strip())


def host_allowed(header: str | None, names: frozenset[str]) -> bool:
    """Whether a request's Host header names this listener (`names`: `host_names`)."""
    if header is None:  # HTTP/1.0 without one: no browser sends that
        return True
    host = _normal(_without_port(header.strip()))
    if "*" in names or host == "localhost" or host in names:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def refusal(header: str | None) -> str:
    shown = (header or "").encode("ascii", "backslashreplace").decode()[:100]
    return (
        f"tracejudge: this listener does not serve the name {shown!r}; an operator adds it to "
        "TRACEJUDGE_ALLOWED_HOSTS"
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
R = TypeVar("R", bound=web.StreamResponse)


def guard_middleware(names: frozenset[str], headers: dict[str, str]) -> Any:
    """An aiohttp middleware: a Host not served is refused with 421, and `headers` go on every
    answer, the errors and redirects raised as exceptions too."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not host_allowed(request.headers.get("Host"), names):
            return _with(web.Response(status=421, text=refusal(request.host)), headers)
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            raise _with(exc, headers) from None
        return _with(response, headers)

    return guard


def _with(response: R, headers: dict[str, str]) -> R:
    for name, value in headers.items():
        response.headers.setdefault(name, value)
    return response


def _without_port(host: str) -> str:
    if host.startswith("["):  # [::1]:8080
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host  # a bare IPv6 address, or a name


def _normal(name: str) -> str:
    return name.strip().lower().rstrip(".")
