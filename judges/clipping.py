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
today and any added later) run on a window around the cut, not on the text: the line it falls
in plus CONTEXT characters either side, at most MARGIN either side, ~0.6 ms a KB. Masking the
kept parts with a margin and cutting their masked form would work too, but masks limit + 2 ×
MARGIN characters per clip, and then again as part of the output. Left out: a keyword and its
value on two lines (`password:` at a line's end), cut between them: the value is kept whole
but, its keyword gone, no longer recognised.

Private key blocks are the one kind longer than any margin worth scanning (1.7-3.3 KB of PEM),
and their own markers delimit them: a block is found from its BEGIN line (searched backward with
`str.rfind`, as fast as memchr) to its END line, or to the end of the text, as the detector
does.
"""

from __future__ import annotations

import functools
import re

from tracejudge.judges.redact import spans
from tracejudge.models.events import clip_between, clip_cuts

# Detected around a cut: the longest secrets after key blocks are JWTs (identity providers'
# access tokens run 800-1,500 characters) and URLs with a password (the detector allows 256 +
# 256); a secret longer than this that crosses a cut keeps the fragment beyond the window.
MARGIN = 2048
# Always looked at on each side of a cut, line or not: a keyword and its separator before a
# value (`"private_key_id" :  "`, 27 characters) and the detectors' look-arounds.
CONTEXT = 64
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
    cuts = clip_cuts(text, limit)
    if cuts is None:
        return text
    head_end, tail_start = cuts
    head_end = _off_secret(text, head_end, backward=True, spare=head_end // 4)
    if tail_start < len(text):
        spare = (len(text) - tail_start) // 4
        tail_start = _off_secret(text, tail_start, backward=False, spare=spare)
    return clip_between(text, head_end, tail_start)


def head_whole(text: str, limit: int) -> str:
    """`text[:limit]`, shorter when the cut would split a secret."""
    if len(text) <= limit:
        return text
    return text[: _off_secret(text, limit, backward=True, spare=limit // 4)]


def _off_secret(text: str, at: int, *, backward: bool, spare: int) -> int:
    """`at`, or the edge of the secret it falls inside: its start (`backward`) or its end; or a
    line break at most `spare` (and SNAP) characters away on the side that is dropped."""
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
        inside = _secret_at(text, at)
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


def _secret_at(text: str, at: int) -> tuple[int, int] | None:
    """The secret `at` falls strictly inside, by the masker's detectors on a window around it."""
    low, high = max(0, at - MARGIN), min(len(text), at + MARGIN)
    # from the start of the line CONTEXT before the cut to the end of the one CONTEXT after it
    start = text.rfind("\n", low, max(low, at - CONTEXT))
    start = low if start < 0 else start + 1
    end = text.find("\n", min(high, at + CONTEXT), high)
    end = high if end < 0 else end
    window = text[start:end]
    for first, last, _ in spans(window):
        if start + first < at < start + last:
            return start + first, start + last
    return None
