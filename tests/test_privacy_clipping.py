"""A secret across a cut is not split: texts are clipped (head and tail) before they
are masked, and a fragment of a secret left on one side of the cut is no longer recognised by the
masker. For every kind masked today (one from the labelled corpus each, in its context), a log
longer than the limit with the secret placed exactly across the head's or the tail's cut, through
the judge's input (a failed call's error shortened to a digest), the digest a call beyond the
step limit keeps, and the timeline: no 6 characters of the secret survive, and the rest of the
log (its first line, its `BUILD FAILURE` line) does."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.leaks import pieces, text_of
from tests.memory import memory_worker
from tests.test_judge_input import block
from tests.test_rules import window_of
from tests.test_windows import store
from tracejudge.judges.llm.prompt import BRIEF_CHARS, DIGEST_CHARS, build_input
from tracejudge.judges.masking.clipping import _ENDS, MARGIN, SHORT, clip_whole, head_whole
from tracejudge.judges.masking.redact import mask, spans
from tracejudge.judges.windows.records import DIGEST_ERROR_CHARS
from tracejudge.judges.windows.timeline import TEXT_LIMIT, timeline_of
from tracejudge.models.events import SUMMARY_LIMIT, clip, clip_cuts, parse_event

CORPUS = Path(__file__).resolve().parent / "data" / "redaction_corpus.jsonl"
FIRST = "[INFO] start of the build\n"
LAST = "\n[ERROR] BUILD FAILURE"
FILLER = "[INFO] building module alpha ok\n"  # no digits, no secret's 6 characters
LENGTH = SUMMARY_LIMIT - 100  # a tool call's error is not clipped on the way in
FRAGMENT = 6
PEM_BODY = "\n".join("MIIEowIBAAKCAQEAu" + f"{i:03d}" + "QzX9" * 10 for i in range(24))
LONG_KEY = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"


def one_per_kind() -> dict[str, tuple[str, str]]:
    """kind -> (a text carrying it, the raw value), as tests/integration/test_privacy.py."""
    found: dict[str, tuple[str, str]] = {}
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["secrets"] and item["kind"] not in found:
            found[item["kind"]] = (item["text"], item["secrets"][0])
    # a key block longer than the window detectors read around a cut (2-4 KB is usual)
    found["private_key_long"] = (f"key file:\n{LONG_KEY}\n", LONG_KEY)
    return found


KINDS = one_per_kind()


def across(context: str, raw: str, cut: int, side: str, length: int) -> str:
    """A log of `length` characters holding `context`, its secret `raw` split by offset `cut`:
    the head keeps the secret's first part (`side` "head") or the tail its last part."""
    context = f"\n{context}\n"  # a line of its own, as in a log
    at = context.index(raw)
    if side == "head":
        inside = max(1, min(len(raw) // 2, cut - len(FIRST) - at - 1))  # of raw, before the cut
    else:
        room = length - cut - (len(context) - at - len(raw)) - len(LAST) - 2
        inside = len(raw) - max(1, min(len(raw) // 2, room))
    start = cut - at - inside  # where the context begins
    before = FIRST + (FILLER * (start // len(FILLER) + 1))[: start - len(FIRST)]
    after_len = length - start - len(context) - len(LAST)
    text = before + context + (FILLER * (after_len // len(FILLER) + 1))[:after_len] + LAST
    assert len(text) == length and text.index(raw) + inside == cut
    return text


def leaks(found: Any, raw: str) -> list[str]:
    """Pieces of `raw`, FRAGMENT long, in any string of `found` (masks and the log's own
    lines taken out)."""
    text = text_of(found)
    return sorted(p for p in pieces(raw, FRAGMENT) if p in text and p not in FIRST + LAST + FILLER)


def failing_run(error: str, fails: int = 7, steps: int = 7) -> list[dict[str, Any]]:
    """A run whose call `fails` fails with `error`."""
    events: list[dict[str, Any]] = [{"type": "task_started", "request_id": "r", "goal": "build"}]
    for i in range(1, steps + 1):
        events.append(
            {
                "type": "tool_call",
                "request_id": "r",
                "step_index": i,
                "tool": "bash",
                "success": i != fails,
                "args_summary": f"mvn -q step {i}",
                "result_preview": "built " * 40 if i != fails else None,
                "error": error if i == fails else None,
            }
        )
    events.append({"type": "final_response", "request_id": "r", "output": "could not build"})
    return events


def cases(limit: int, length: int = LENGTH) -> list[Any]:
    head, tail = clip_cuts("x" * length, limit) or (0, 0)
    return [
        pytest.param(context, raw, cut, side, id=f"{kind}-{side}")
        for kind, (context, raw) in KINDS.items()
        for side, cut in (("head", head), ("tail", tail))
    ]


@pytest.mark.parametrize(("context", "raw", "cut", "side"), cases(DIGEST_CHARS))
def test_a_secret_across_a_digest_cut_does_not_reach_the_judge(
    context: str, raw: str, cut: int, side: str
) -> None:
    log = across(context, raw, cut, side, LENGTH)
    # thirty failures of 1,900 characters, twice the room holds half: the others are shortened
    # to digests before they are masked
    events = failing_run(log, fails=0, steps=30)
    for event in events[1:-1]:
        event.update(success=False, error=log, result_preview=None)
    data = block(build_input(window_of(events), 24_000).content)
    digests = [s for s in data["steps"] if s.get("shortened") and len(s["error"]) > BRIEF_CHARS]
    assert digests and all("…[clipped" in s["error"] for s in digests)
    assert leaks(data, raw) == []
    for step in digests:
        assert step["error"].startswith(FIRST.strip()) and step["error"].endswith(LAST.strip())


@pytest.mark.parametrize(("context", "raw", "cut", "side"), cases(DIGEST_ERROR_CHARS))
async def test_a_secret_across_the_cut_of_a_step_beyond_the_limit_does_not_reach_the_judge(
    context: str, raw: str, cut: int, side: str
) -> None:
    log = across(context, raw, cut, side, LENGTH)
    s = store(max_steps=3, tail_steps=1)
    # the failed call is beyond the limit and not among the last steps: kept as its digest
    for event in failing_run(log, fails=5, steps=8)[:-1]:
        assert s.add(parse_event(event), 0, 1.0) == "added"
    window = s.collect("r", "final_response")
    assert window.steps_dropped
    data = block(build_input(window, 16_000).content)
    failed = [x for x in data["steps"] if x.get("ok") is False]
    assert failed and all("…[clipped" in x["error"] for x in failed)
    assert leaks(data, raw) == []
    assert failed[0]["error"].endswith(LAST.strip())


@pytest.mark.parametrize(("context", "raw", "cut", "side"), cases(TEXT_LIMIT))
def test_a_secret_across_a_timeline_cut_is_not_kept(
    context: str, raw: str, cut: int, side: str
) -> None:
    log = across(context, raw, cut, side, LENGTH)
    timeline = timeline_of(window_of(failing_run(log)))
    (entry,) = [e for e in timeline if e.get("success") is False]
    assert leaks(timeline, raw) == []
    assert entry["error"].endswith(LAST.strip())


def test_a_cut_moved_off_a_secret_keeps_the_limit_and_counts_what_went() -> None:
    context, raw = KINDS["jwt"]
    head, _ = clip_cuts("x" * LENGTH, 400) or (0, 0)
    log = across(context, raw, head, "head", LENGTH)
    clipped = clip_whole(log, 400)
    assert len(clipped) <= 400
    kept_head, rest = clipped.split(" …[clipped ", 1)
    count, kept_tail = rest.split("]… ", 1)
    assert len(kept_head) + int(count) + len(kept_tail) == len(log)
    # the head ends before the secret: where it began, or at the line break just before it
    assert len(kept_head) <= log.index(raw) and log[len(kept_head) - 1] in "\n" + raw[:1]
    # a head only cut does the same; a cut that splits nothing is left where it was
    assert head_whole(log, head) == kept_head
    plain = "x=1 " * MARGIN  # one line, no secret
    assert clip_whole(plain, 400) == clip(plain, 400)


def test_only_short_secrets_and_a_urls_password_hold_what_ends_a_window() -> None:
    # judges/masking/clipping.py reads around a cut only as far as the run that no long secret
    # crosses: a kind added to the detectors that breaks the rule must widen the window, not leak
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        text = json.loads(line)["text"]
        for start, end, kind in spans(text):
            value = text[start:end]
            if kind != "private_key" and any(c in value for c in _ENDS):
                assert len(value) <= SHORT or (
                    kind == "url_password" and "://" in text[max(0, start - 600) : start]
                ), (kind, value)


def minified(raw: str, at: int, length: int) -> str:
    """One JSON line of `length` characters with no space, `raw` a value crossing offset `at`."""
    filler = json.dumps([{"id": i, "ok": True} for i in range(2000)], separators=(",", ":"))
    opening = '{"token":"'
    # of raw, before the cut: half, or what the room on either side allows
    before = min(max(len(raw) // 2, len(raw) - (length - at - 2)), at - len(opening))
    start = at - before - len(opening)
    text = filler[:start] + opening + raw + '"}' + filler
    text = text[:length]
    assert " " not in text and text.index(raw) < at < text.index(raw) + len(raw)
    return text


@pytest.mark.parametrize(
    "raw",
    [
        KINDS["jwt"][1],
        KINDS["github_token"][1],
        "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwiYXVkIjoiYXBpIn0"
        + ".s1Gn"
        + "_x9Kq" * 300,
        "https://deploy:" + "p4ss,w0rd;{x}" * 19 + "@example.com/repo",
    ],
    ids=["jwt", "github", "jwt-1.5k", "url-password-with-json-punctuation"],
)
@pytest.mark.parametrize("limit", [BRIEF_CHARS, DIGEST_CHARS, SUMMARY_LIMIT])
def test_a_secret_in_minified_json_across_a_cut_is_kept_whole_or_dropped(
    raw: str, limit: int
) -> None:
    # no space to end a window: the punctuation of JSON does, but not inside a URL's password
    length = 3 * limit + 2 * MARGIN
    head, tail = clip_cuts("x" * length, limit) or (0, 0)
    secret = raw.split("://deploy:")[-1].split("@")[0]
    for at in (head, tail):
        text = minified(raw, at, length)
        for clipped in (clip_whole(text, limit), head_whole(text, at)):
            assert leaks(mask(clipped), secret) == []


ARRIVAL = 3 * SUMMARY_LIMIT // 2  # a tool call's error over its contract limit


@pytest.mark.parametrize(("context", "raw", "cut", "side"), cases(SUMMARY_LIMIT, ARRIVAL))
async def test_a_secret_across_the_cut_of_an_arriving_event_reaches_no_output(
    context: str, raw: str, cut: int, side: str
) -> None:
    # the worker clips an event's text over its limit as it parses it, before anything is
    # masked: the cut installed by judges/masking/clipping.py moves off the secret
    log = across(context, raw, cut, side, ARRIVAL)
    w = memory_worker(
        llm_judge_enabled=True,
        llm_base_url="http://127.0.0.1:9/v1",
        worker_judges=False,  # the job is published, not judged here
        llm_judge_flagged=True,
        llm_sample_rate=1.0,
        timelines="all",
    )
    for event in failing_run(log, fails=2, steps=3):
        await w.event(event)
    await asyncio.sleep(0)  # publishing is scheduled: let it run
    (evaluation,) = w.channel("evaluations").values()
    (job,) = w.channel("judge_requests").values()
    sent = [m.value.decode() for c in vars(w.channels).values() for m in c.sent if m.value]
    assert "…[clipped" in job["content"] and job["timeline"]
    for found in (evaluation, job["content"], job["timeline"], sent):
        assert leaks(found, raw) == []
    # what is around the secret is kept: the log's first line and its last
    assert FIRST.strip() in job["content"] and LAST.strip() in job["content"]
