"""The detectors `redact.py` masks with: vendors' token shapes from detect-secrets' plugins,
and patterns here, each with a checksum where its kind has one.

Every pattern is linear in its input: a token-like pattern may only start where the previous
character cannot be part of it (a lookbehind), so a long run is scanned once, not once per
start position. detect-secrets' keyword, NPM and IBM plugins are left out: their regexes are
quadratic on long adversarial input (measured by `benchmarks/adversarial.py`).
"""

from __future__ import annotations

import binascii
import re
from base64 import b64decode
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

import phonenumbers
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector
from stdnum import luhn
from stdnum.us import ssn

Span = tuple[int, int, str]

# detect-secrets plugin -> the kind named in the mask
_PLUGINS: tuple[tuple[RegexBasedDetector, str], ...] = (
    (AWSKeyDetector(), "aws_access_key"),
    (AzureStorageKeyDetector(), "azure_key"),
    (BasicAuthDetector(), "url_password"),
    (GitHubTokenDetector(), "github_token"),
    (GitLabTokenDetector(), "gitlab_token"),
    (OpenAIDetector(), "api_key"),
    (SlackDetector(), "slack_token"),
    (StripeDetector(), "stripe_key"),
    (SendGridDetector(), "api_key"),
    (PypiTokenDetector(), "api_key"),
    (TwilioKeyDetector(), "api_key"),
    (DiscordBotTokenDetector(), "api_key"),
    (TelegramBotTokenDetector(), "api_key"),
    (SquareOAuthDetector(), "api_key"),
    (MailchimpDetector(), "api_key"),
)

_TOKEN = r"(?<![A-Za-z0-9_-])"  # a token starts here only if it does not continue one
_DIGITS = r"(?<![\d])"  # a number starts here only if no digit precedes


def _card(digits: str) -> bool:
    """Luhn, and a length its brand's prefix (ISO/IEC 7812 issuer ranges) allows: a Luhn-valid
    timestamp or ID number is not a card."""
    n = len(digits)
    two, four = int(digits[:2]), int(digits[:4])
    if digits[0] == "4":
        lengths: tuple[int, ...] = (13, 16, 19)
    elif 51 <= two <= 55 or 2221 <= four <= 2720:
        lengths = (16,)
    elif two in (34, 37):
        lengths = (15,)
    elif (
        3528 <= four <= 3589
        or two == 62
        or four == 6011
        or two == 65
        or 644 <= int(digits[:3]) <= 649
    ):
        lengths = (16, 17, 18, 19)
    elif 300 <= int(digits[:3]) <= 305 or two in (36, 38, 39):
        lengths = (14, 15, 16, 17, 18, 19)
    else:
        return False
    return n in lengths and luhn.is_valid(digits)


def _iban(text: str) -> bool:
    """ISO 13616: the mod-97 check every IBAN has (not each country's national checks)."""
    if not 15 <= len(text) <= 34:
        return False
    moved = text[4:] + text[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


_RIC_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def _ric(text: str) -> bool:
    """GB 11643: a birth date that exists and the ISO 7064 MOD 11-2 check character. The
    region is not checked: county codes change, the check character does not."""
    body, check = text[:17], text[17].upper()
    try:
        date(int(body[6:10]), int(body[10:12]), int(body[12:14]))
    except ValueError:
        return False
    total = sum(int(d) * w for d, w in zip(body, _RIC_WEIGHTS, strict=True))
    return "10X98765432"[total % 11] == check


def _basic(text: str) -> bool:
    """RFC 7617: the credentials are base64 of `user:password`, so "basic authentication" or
    "basic commands" in prose and comments, which do not decode to that, stay."""
    try:
        decoded = b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return ":" in decoded and decoded.isprintable()


# What follows a secret's keyword in code and issue text without being a secret: a value
# computed by a call or an index (detect-secrets' `is_indirect_reference`, anchored at the
# value rather than anywhere on the line), a template or a variable reference, an empty query
# parameter (the `&` starts the next one), or the keyword's own name as a placeholder
# (`user=user, password=password`). A value cut short by a clipper (`x...[+900 chars]`,
# `x…`) only shows what precedes the ellipsis, which must be long enough on its own.
_COMPUTED = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*[(\[]")
_CLIPPED = re.compile(r"(.*?)(?:\.\.\.|…)(?:[\[(].*)?")
_KEYWORD_VALUE_MIN = 6


def _keyword_value_is_code(match: re.Match[str]) -> bool:
    key, value = match.group(1), match.group(2)
    if key == "PWD":
        # the shell's working directory (`PWD=/repo` in `env`), never a password: a keyword
        # written in capitals otherwise (PASSWORD=...) still counts
        return True
    quoted = match.string[match.start(2) - 1 : match.start(2)] in "\"'"
    clipped = _CLIPPED.fullmatch(value)
    return (
        value[0] in "$&{<"
        or (clipped is not None and len(clipped.group(1)) < _KEYWORD_VALUE_MIN)
        or value.lower() == key.lower()
        or (not quoted and _COMPUTED.match(value) is not None)
    )


def _ssn(text: str) -> bool:
    return ssn.is_valid(text)


_INTERNATIONAL_MIN_DIGITS = 7


def _phone(text: str) -> bool:
    """An explicit country code with a plausible length for it, or a valid national number.

    With a country code, at least 7 digits in all (the shortest numbers in use, e.g. +290 and
    +683 with 4-digit subscribers): some plans count 2-3 digits as possible, which would take
    a diff's hunk range (`@@ -120,7 +4991,8 @@`) or a signed number for a phone."""
    try:
        if text.startswith("+"):
            if sum(c.isdigit() for c in text) < _INTERNATIONAL_MIN_DIGITS:
                return False
            return phonenumbers.is_possible_number(phonenumbers.parse(text, None))
        return phonenumbers.is_valid_number(phonenumbers.parse(text, "US"))
    except phonenumbers.NumberParseException:
        return False


def _cn_phone(text: str) -> bool:
    try:
        return phonenumbers.is_valid_number(phonenumbers.parse(text, "CN"))
    except phonenumbers.NumberParseException:
        return False


@dataclass(frozen=True)
class _Pattern:
    kind: str
    regex: re.Pattern[str]
    group: int = 0  # mask only this group (a label before it stays readable)
    check: Callable[[str], bool] | None = None  # a checksum the match must pass
    # the match, read in its context, is not a secret (code, a placeholder)
    unless: Callable[[re.Match[str]], bool] | None = None

    def spans(self, text: str) -> Iterator[Span]:
        for match in self.regex.finditer(text):
            value = match.group(self.group)
            if not value:
                continue
            if self.unless is not None and self.unless(match):
                continue
            if self.check is not None and not self.check(re.sub(r"[\s().-]", "", value)):
                continue
            yield match.start(self.group), match.end(self.group), self.kind


def _p(kind: str, pattern: str, flags: int = 0, **kw: Any) -> _Pattern:
    return _Pattern(kind, re.compile(pattern, flags), **kw)


PATTERNS: tuple[_Pattern, ...] = (
    # the whole block, or to the end of the text when it was cut
    _p(
        "private_key",
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----"
        r"(?:[^-]|-(?!----END ))*(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----)?",
    ),
    _p("jwt", _TOKEN + r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"),
    _p("bearer", r"(?i)\b(?:bearer|token)\s+([A-Za-z0-9._~+/=-]{8,})", group=1),
    _p("basic_auth", r"(?i)\bbasic\s+([A-Za-z0-9+/]{8,}={0,2})", group=1, check=_basic),
    _p(
        "url_password", r"(?i)\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@]{0,256}:([^\s@/]{1,256})@", group=1
    ),
    _p(
        "github_token",
        _TOKEN + r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
    ),
    _p("slack_token", _TOKEN + r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    _p("aws_access_key", _TOKEN + r"(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}(?![0-9A-Z])"),
    _p(
        "aws_secret",
        r"(?i)\baws_?secret_?access_?key\b[\"']?\s{0,5}[:=]\s{0,5}[\"']?([A-Za-z0-9/+=]{30,})",
        group=1,
    ),
    _p("gcp_api_key", _TOKEN + r"AIza[0-9A-Za-z_-]{35}"),
    _p("azure_secret", _TOKEN + r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}"),
    _p("azure_sas", r"(?i)[?&]sig=([A-Za-z0-9%/+=]{20,})", group=1),
    _p(
        "api_key",
        _TOKEN + r"(?:sk|rk|pk)[-_](?:proj-|ant-|live_|test_|live-|test-)?"
        r"[A-Za-z0-9_-]{16,}",
    ),
    _p(
        "api_key",
        # `$PWD` / `$password` is a variable being read, not a value being given
        r"(?i)(?<!\$)\b(api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|secret"
        r"|password|passwd|pwd|private[_-]?key[_-]?id)[\"']?\s{0,5}[:=]\s{0,5}[\"']?"
        r"([^\s\"',;}{]{6,})",  # _KEYWORD_VALUE_MIN
        group=2,
        unless=_keyword_value_is_code,
    ),
    _p(
        "email",
        r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}"
        r"(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}\b(?!:[\w./~-])",
    ),
    _p("card_number", _DIGITS + r"\d(?:[ -]?\d){12,18}(?!\d)", check=_card),
    _p(
        "iban",
        r"(?<![A-Z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Z0-9])",
        check=_iban,
    ),
    _p("cn_resident_id", _DIGITS + r"\d{17}[\dXx](?![\dXx])", check=_ric),
    _p("us_ssn", _DIGITS + r"\d{3}-\d{2}-\d{4}(?!\d)", check=_ssn),
    # `,\d` after it: a range or a list of numbers (a diff's `+4991,8`), not a phone
    _p(
        "phone",
        r"(?<![A-Za-z0-9+])\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?!\d|,\d)",
        check=_phone,
    ),
    _p("phone", r"(?<![A-Za-z0-9+])\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?!\d)", check=_phone),
    # Most 11-digit numbers starting 13-19 are valid Chinese mobile numbers, so the digits
    # must stand alone: not inside a path (`/job/15887766554`), a hash, an identifier or a
    # literal (`id1391...`, `...e1391...f`, `1391...L`); Chinese text may touch them.
    _p(
        "phone",
        r"(?<![0-9A-Za-z_/.])(?:86[ -]?)?1[3-9]\d[ -]?\d{4}[ -]?\d{4}(?![0-9A-Za-z_])",
        check=_cn_phone,
    ),
)


def plugin_spans(text: str) -> Iterator[Span]:
    # The plugins' own analyze_string returns capture groups, which for most of them are only
    # the token's prefix ("ghp", "glpat"): their regexes are used directly, masking the group
    # when it is the secret (a URL's password, an AWS secret) and the whole match otherwise.
    for plugin, kind in _PLUGINS:
        for regex in plugin.denylist:
            for match in regex.finditer(text):
                group = 1 if regex.groups and len(match.group(1) or "") >= 8 else 0
                yield match.start(group), match.end(group), kind
