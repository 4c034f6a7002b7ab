"""Clip a text that is not masked yet without cutting through a secret.

Long texts are clipped before they are masked, so that masking reads only what is kept (a window
at the step limit holds ~300 KB of text, a judge input shows 24 KB). But a secret that straddles
a cut loses the characters on the other side, and the masker no longer recognises the fragment
left in the head or the tail (`sk-proj-…` short of its 16 characters, half a JWT, 9 digits of a
card): that fragment would reach the judge, the timeline, an evaluation.

So the cuts move off secrets: a cut that falls inside one moves to its edge (the head's end back
to where the secret starts, the tail's start on to where it ends), and the secret is either
kept whole, where the masker finds it, or dropped whole. The text stays unmasked (its callers
mask it, once, as before), and the mark counts what was really cut.

No secret but a key block spans a line break, so a cut at most SNAP characters from one moves to
it and needs no detector: a log's cuts cost a `str.rfind` and keep whole lines. Elsewhere (one
long line: JSON, minified code) the masker's own detectors (`redact.spans`, so every kind masked
today and any added later) run on a window around the cut, not on the text, ~0.6 ms a KB. The
window is as small as the detectors allow: no secret longer than SHORT characters has a space,
tab or line break inside (a card, an IBAN, a phone number do, and are shorter; a token, a JWT, a
keyword's value, a URL's password do not), so one that crosses the cut lies between the last
space before it and the first after it, or within SHORT of it; CONTEXT more either side holds a
keyword and its separator and the detectors' look-arounds; at most MARGIN either side (minified
JSON has no space). tests/test_privacy_clipping.py checks that rule on every kind.

The judge's input cuts each failed step's texts at several sizes (a digest, a brief, a call's
key), all near the text's two ends: the secrets near each end are found once per text, in one
window that serves every cut up to EDGE from that end (`_Scans`), so a 2 KB line costs one scan
of ~0.7 KB, not one per cut. The cuts of arriving events (models/events.py, installed below)
fall in the middle of texts that are seen once: they scan their own window, and nothing of
them is cached.

Masking the kept parts with a margin and cutting their masked form would work too, but masks
limit + 2 × MARGIN characters per clip, and then again as part of the output. Left out: a
keyword and its value on two lines (`password:` at a line's end), cut between them: the value is
kept whole but, its keyword gone, no longer recognised.

Private key blocks are the one kind longer than any margin worth scanning (1.7-3.3 KB of PEM),
and their own markers delimit them: a block is found from its BEGIN line (searched backward with
`str.rfind`, as fast as memchr) to its END line, or to the end of the text, as the detector
does.
"""

from __future__ import annotations

import functools
import re

from tracejudge.judges.masking.detectors import Span
from tracejudge.judges.masking.redact import spans
from tracejudge.models import events
from tracejudge.models.events import clip_between, clip_cuts

# Detected around a cut at most: the longest secrets after key blocks are JWTs (identity
# providers' access tokens run 800-1,500 characters) and URLs with a password (the detector
# allows 256 + 256); a secret longer than this that crosses a cut keeps the fragment beyond it.
MARGIN = 2048
# Always looked at on each side of a secret: a keyword and its separator before a value
# (`"private_key_id" :  "`, 27 characters) and the detectors' look-arounds.
CONTEXT = 64
# The longest secret with a space (or one of _ENDS) inside: a card (37 with separators), an
# IBAN (43), a phone number (39); every longer kind is one run of characters without any.
SHORT = 48
_SPACES = " \t\n\r"  # \s has more; fewer here only widens a window
# nor one of these (JSON's and code's punctuation), but a URL's password (up to 256 characters)
_ENDS = _SPACES + "\"',;{}"
# Cuts this close to a text's end share one scan of that end (a digest of 400 characters cuts
# 192 from each end, a timeline's 300 at 142, a brief's 120 at 52); farther, their own window.
EDGE = 200
_BEGIN = "-----BEGIN "
_KEY_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_KEY_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_MOVES = 4  # a moved cut may land in another secret (a key next to a token): bounded
# A cut this close to a line break moves to it, but never drops more than a quarter of a part:
# a digest's head of 190 characters loses half a log line at most, a brief's 50 only a few.
SNAP = 64
_BREAKS = "\n\r"


@functools.lru_cache(maxsize=256)  # the judge input clips a text at a few sizes, repeatedly
def clip_whole(text: str, limit: int) -> str:
    """`models.events.clip`, head and tail, with every cut moved off any secret it would split;
    at most `limit` characters (a moved cut keeps less, the mark counts more)."""
    return _clip(text, limit, _scans_of(text))


def clip_arriving(text: str, limit: int) -> str:
    """`clip_whole` for a text seen once (an event's field over its contract limit, as it is
    parsed): as long as an agent sends it, so not cached."""
    return _clip(text, limit, _Scans(text))


def head_whole(text: str, limit: int) -> str:
    """`text[:limit]`, shorter when the cut would split a secret."""
    if len(text) <= limit:
        return text
    return text[: _off_secret(_scans_of(text), limit, backward=True, spare=limit // 4)]


def quote_whole(text: str, limit: int) -> str:
    """`head_whole` for a rule's evidence quoted from the run (a sentence, an error), masked
    where it goes out: never empty for a text that is not, as rules test their evidence for
    truth, so a secret longer than `limit` at its start leaves "…", not a finding lost."""
    return head_whole(text, limit) or ("…" if text else "")


def clear_caches() -> None:
    """Forget every text seen (benchmarks time a cold start)."""
    clip_whole.cache_clear()
    _scans_of.cache_clear()


def _clip(text: str, limit: int, scans: _Scans) -> str:
    cuts = clip_cuts(text, limit)
    if cuts is None:
        return text
    head_end, tail_start = cuts
    head_end = _off_secret(scans, head_end, backward=True, spare=head_end // 4)
    if tail_start < len(text):
        spare = (len(text) - tail_start) // 4
        tail_start = _off_secret(scans, tail_start, backward=False, spare=spare)
    return clip_between(text, head_end, tail_start)


def _off_secret(scans: _Scans, at: int, *, backward: bool, spare: int) -> int:
    """`at`, or the edge of the secret it falls inside: its start (`backward`) or its end; or a
    line break at most `spare` (and SNAP) characters away on the side that is dropped."""
    text = scans.text
    for _ in range(_MOVES):
        block = _key_block(text, at)
        if block is not None:
            at = block[0] if backward else block[1]
            continue
        if not 0 < at < len(text) or text[at - 1] in _BREAKS or text[at] in _BREAKS:
            return at  # between two lines: only a key block crosses a line break
        reach = min(SNAP, spare)
        if backward:
            found = text.rfind("\n", at - reach, at)
            if found >= 0:
                return found + 1
        else:
            found = text.find("\n", at, at + reach)
            if found >= 0:
                return found
        inside = scans.secret_at(at)
        if inside is None:
            return at
        at = inside[0] if backward else inside[1]
    return at


def _key_block(text: str, at: int) -> tuple[int, int] | None:
    """The private key block `at` falls strictly inside, by its markers (see the module)."""
    # a BEGIN line starting before `at`, even if `at` cuts the marker itself
    begin = text.rfind(_BEGIN, 0, at + len(_BEGIN) - 1)
    if begin < 0 or begin >= at:
        return None
    if _KEY_BEGIN.match(text, begin) is None:
        return None
    # the detector's body runs to the first END line of any kind, then takes it if it is a key's
    end = text.find("-----END ", begin)
    if end < 0:
        stop = len(text)
    else:
        closing = _KEY_END.match(text, end)
        stop = closing.end() if closing else end
    return (begin, stop) if begin < at < stop else None


def _window(text: str, at: int) -> tuple[int, int]:
    """What the detectors must read to find a secret across `at` as the masker would (see the
    module): CONTEXT beyond the run around `at` that no long secret crosses, or beyond SHORT of
    it; at most MARGIN either side."""
    low, high = max(0, at - MARGIN), min(len(text), at + MARGIN)
    # a URL's password may hold any of _ENDS but a space: near one, only spaces end a run
    ends = _SPACES if text.rfind("://", low, at + 2) >= 0 else _ENDS
    before = max(text.rfind(c, low, at) for c in ends)
    after = min((f for c in ends if (f := text.find(c, at, high)) >= 0), default=high)
    start = min(at - SHORT, low if before < 0 else before + 1) - CONTEXT
    end = max(at + SHORT, after) + CONTEXT
    return max(0, start), min(len(text), end)


class _Scans:
    """The secrets of one text around its cuts: one scan for every cut near each end."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._head: tuple[int, list[Span]] | None = None  # scanned up to, found
        self._tail: tuple[int, list[Span]] | None = None  # scanned from, found

    def secret_at(self, at: int) -> Span | None:
        """The secret `at` falls strictly inside."""
        start, end = _window(self.text, at)
        if at <= EDGE:
            up_to, found = self._end(head=True)
            if end <= up_to:  # always: a window grows with its cut
                return _across(found, at)
        if at >= len(self.text) - EDGE:
            since, found = self._end(head=False)
            if start >= since:
                return _across(found, at)
        return _across(self._scan(start, end), at)

    def _end(self, *, head: bool) -> tuple[int, list[Span]]:
        """The head's scan (up to where) or the tail's (from where): for every cut up to EDGE
        from that end, the window of the one farthest from it."""
        if (self._head if head else self._tail) is None:
            n = len(self.text)
            up_to = _window(self.text, min(EDGE, n))[1]
            since = _window(self.text, max(0, n - EDGE))[0]
            if up_to >= since:  # the two ends' windows meet: one scan of the whole
                found = self._scan(0, n)
                self._head, self._tail = (n, found), (0, found)
            elif head:
                self._head = (up_to, self._scan(0, up_to))
            else:
                self._tail = (since, self._scan(since, n))
        scanned = self._head if head else self._tail
        assert scanned is not None
        return scanned

    def _scan(self, start: int, end: int) -> list[Span]:
        return [(start + a, start + b, kind) for a, b, kind in spans(self.text[start:end])]


def _across(found: list[Span], at: int) -> Span | None:
    return next((s for s in found if s[0] < at < s[1]), None)


# one per text (a failed step's error is cut as a digest, a brief and a key): texts reaching
# here were clipped on arrival to 8,000 characters at most, so 512 hold ~4 MB at worst
@functools.lru_cache(maxsize=512)
def _scans_of(text: str) -> _Scans:
    return _Scans(text)


# Events are clipped as they are parsed, before anything is masked (models/events.py): from
# here on, in every process that judges (the worker, replay), their cuts move off secrets too.
# The models cannot import this module (they stay free of the detectors, which the light client
# must not load); importing any judge runs this line, as `judges/__init__.py` imports it.
events.set_arrival_clip(clip_arriving)
