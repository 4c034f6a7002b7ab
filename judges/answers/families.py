"""The phrase families of prompts/generic_patterns.json, and what one sentence of an answer is.

A sentence is a question to the user (clarification), filler (courtesy, readiness, what the
agent can do or is about to do, a bare acknowledgement, or English made only of the words of
assistant-speak), or content. Families are data, filed as seed 004 files them; this module only
folds text and applies them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache, lru_cache

import opencc

from tracejudge.judges.masking.clipping import quote_whole
from tracejudge.judges.masking.redact import spans
from tracejudge.prompts import read_prompt

CJK = re.compile(r"[\u3400-\u9fff]")
QUOTE_CHARS = 60  # of a sentence quoted as the pattern found
# An answer that ends its one announcement with an ellipsis shows the work starting (seed 004:
# "I can see this is...\n\nLet me analyze..." is not filler); "Setting up the context..." is.
_CONTINUES = re.compile(r"^\s*let me \w+(?: \w+)?\s*(?:\.\.\.|…)\s*$", re.IGNORECASE)


# code, numbers, file names, identifiers, calls: a sentence holding one is never filler by
# pattern (announcements aside: "I'll open tests/test_api.py" still did nothing)
_CONCRETE = re.compile(r"`|\d|\w\.\w|\w_\w|\w\(\)|https?://")


_TO_THE_USER = re.compile(
    r"\b(?:you|your|yours|you re|you d|you ll)\b|^(?:what|which|who|when|where|why|how|do|does|did|"
    r"is|are|can|could|would|should|shall|will|may|any)\b|\b(?:should|shall) i\b"
    r"|^(?:and|or|also|but|so) (?:what|which|who|when|where|why|how|do|does|is|are|can|could|"
    r"would|should|will)\b"
    r"|您|你|请问|吗|呢|哪|什么|是否|多少|几"
)


_REFUSAL = re.compile(
    r"\b(?:can t|cannot|can not|unable to|won t|not able to) "
    r"(?:help|assist|comply|do (?:that|this)|"
    r"translate|answer|respond|provide)|无法(?:帮助|回答|处理|协助|提供)|不能(?:帮助|回答)"
)
_CLAUSE = re.compile(r"[，；：,;:]")
_CJK_GAP = re.compile(r"(?<=[\u3400-\u9fff]) (?=[\u3400-\u9fff])")
# a code span with an expression or a command in it ("`df.rename(columns=…)`", "`pip install
# requests`") answers; a bare name ("`/health` or `/healthz`?") only offers options
_LEAD_IN = re.compile(r"[:：]\s*\n|(?:以下是|下面是|如下)[^。\n]{0,40}[:：]")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _answers_in_code(sentence: str) -> bool:
    return any(re.search(r"[(= ]", span) for span in _CODE_SPAN.findall(sentence))


# text the prompt hands over to work on: quoted, or after a colon
_QUOTED = re.compile(
    r"'[^']{3,}'|\"[^\"]{3,}\"|“[^”]{3,}”|‘[^’]{3,}’|「[^」]{2,}」|『[^』]{2,}』|[:：]\s*\S.*",
    re.DOTALL,
)


@dataclass(frozen=True)
class Families:
    clarification: tuple[str, ...]
    filler: tuple[str, ...]
    filler_patterns: tuple[re.Pattern[str], ...]
    announcements: tuple[re.Pattern[str], ...]
    outcomes: tuple[re.Pattern[str], ...]
    looks_into: tuple[re.Pattern[str], ...]
    capability: tuple[re.Pattern[str], ...]
    acknowledgements: tuple[str, ...]
    meta_words: frozenset[str]
    clarification_patterns: tuple[re.Pattern[str], ...]
    meta_hanzi: re.Pattern[str]
    text_requests: tuple[re.Pattern[str], ...]
    rewrites: tuple[re.Pattern[str], ...]
    talks_about_the_request: tuple[re.Pattern[str], ...]
    missing_input: tuple[re.Pattern[str], ...]
    vague_steps: tuple[re.Pattern[str], ...]
    identity_questions: tuple[re.Pattern[str], ...]
    tool_echo: re.Pattern[str]
    code_requests: tuple[re.Pattern[str], ...]
    limitations: tuple[re.Pattern[str], ...]
    answers_to_yes_no: frozenset[str]
    task_verbs: tuple[str, ...]
    not_an_object: frozenset[str]
    question_words: tuple[str, ...]
    task_markers_zh: tuple[str, ...]


@cache
def _to_simplified() -> opencc.OpenCC:
    return opencc.OpenCC("t2s")


def fold_chinese(text: str) -> str:
    """Traditional characters to simplified ("這是一個問題" -> "这是一个问题"), so one set of
    Chinese families serves both (OpenCC, a few microseconds a call)."""
    return str(_to_simplified().convert(text)) if CJK.search(text) else text


@lru_cache(maxsize=1024)  # the same prompt and sentences are folded many times per answer
def normalise(text: str) -> str:
    """Lower case, punctuation and spacing folded, traditional Chinese to simplified:
    "Ready  to assist!" -> "ready to assist"."""
    return " ".join(re.sub(r"[^\w]+", " ", fold_chinese(text).lower()).split())


@cache
def families() -> Families:
    data = json.loads(read_prompt("generic_patterns.json"))
    return Families(
        clarification=tuple(normalise(p) for p in data["clarification"]),
        filler=tuple(normalise(p) for p in data["filler"]),
        filler_patterns=tuple(re.compile(p) for p in data["filler_patterns"]),
        announcements=tuple(re.compile(p) for p in data["announcements"]),
        outcomes=tuple(re.compile(p) for p in data["outcomes"]),
        looks_into=tuple(re.compile(p) for p in data["looks_into"]),
        capability=tuple(re.compile(p) for p in data["capability"]),
        # longest first, so "明白了" is stripped whole rather than "明白" leaving "了"
        acknowledgements=tuple(
            sorted((normalise(p) for p in data["acknowledgements"]), key=len, reverse=True)
        ),
        meta_words=frozenset(data["meta_words"]),
        clarification_patterns=tuple(re.compile(p) for p in data["clarification_patterns"]),
        text_requests=tuple(re.compile(p) for p in data["text_requests"]),
        rewrites=tuple(re.compile(p) for p in data["rewrites"]),
        talks_about_the_request=tuple(re.compile(p) for p in data["talks_about_the_request"]),
        missing_input=tuple(re.compile(p) for p in data["missing_input"]),
        vague_steps=tuple(re.compile(p) for p in data["vague_steps"]),
        identity_questions=tuple(re.compile(p) for p in data["identity_questions"]),
        tool_echo=re.compile(data["tool_echo"]),
        code_requests=tuple(re.compile(p) for p in data["code_requests"]),
        limitations=tuple(re.compile(p) for p in data["limitations"]),
        answers_to_yes_no=frozenset(normalise(p) for p in data["answers_to_yes_no"]),
        meta_hanzi=re.compile(
            "|".join(re.escape(w) for w in sorted(data["meta_hanzi"], key=len, reverse=True))
        ),
        task_verbs=tuple(normalise(p) for p in data["task_verbs"]),
        not_an_object=frozenset(normalise(p) for p in data["not_an_object"]),
        question_words=tuple(normalise(p) for p in data["question_words"]),
        task_markers_zh=tuple(data["task_markers_zh"]),
    )


def first(text: str, phrases: tuple[str, ...]) -> str | None:
    """A phrase of the family that the folded text contains (one pass over the text)."""
    latin, hanzi = _alternation(phrases)
    found = latin.search(text) if latin is not None else None
    if found:
        return found.group(0)
    if hanzi:
        squeezed = text.replace(" ", "")
        return next((p for p in hanzi if p in squeezed or p in text), None)
    return None


@cache
def _alternation(phrases: tuple[str, ...]) -> tuple[re.Pattern[str] | None, tuple[str, ...]]:
    latin = sorted((p for p in phrases if not CJK.search(p)), key=len, reverse=True)
    pattern = (
        re.compile(r"(?<![a-z0-9])(?:" + "|".join(map(re.escape, latin)) + r")(?![a-z0-9])")
        if latin
        else None
    )
    return pattern, tuple(p for p in phrases if CJK.search(p))


@cache
def _acknowledgement_heads() -> tuple[frozenset[str], frozenset[str]]:
    """The first word of each Latin acknowledgement, the first character of each Chinese one:
    a text that starts with neither starts with no acknowledgement."""
    acks = families().acknowledgements
    return (
        frozenset(a.split(" ", 1)[0] for a in acks if not CJK.search(a)),
        frozenset(a[:1] for a in acks if CJK.search(a)),
    )


def strip_acknowledgements(norm: str) -> str:
    """ "ok sure here it is" -> "here it is"; "好的 没问题" -> ""."""
    fam = families()
    latin, hanzi = _acknowledgement_heads()
    changed = True
    while norm and changed:
        # most sentences open with no acknowledgement: one set lookup instead of a hundred
        # prefix tests
        if norm.split(" ", 1)[0] not in latin and norm[:1] not in hanzi:
            break
        changed = False
        for ack in fam.acknowledgements:
            if CJK.search(ack):
                if norm.startswith(ack):
                    norm, changed = norm[len(ack) :].strip(), True
                    break
            elif norm == ack or norm.startswith(ack + " "):
                norm, changed = norm[len(ack) :].strip(), True
                break
    return norm


def _quote(sentence: str) -> str:
    """A sentence of the answer quoted as the pattern found: as written, not normalised (the
    masker recognises no secret lower-cased and stripped of its punctuation), and never cut
    through one (judges/masking/clipping.py)."""
    return quote_whole(sentence.strip(), QUOTE_CHARS)


def _folding(text: str) -> tuple[str, list[int]] | None:
    """`normalise(text)` and, for each of its characters, the index in `text` of the one it
    came from; None when folding changed the number of characters (an OpenCC phrase of another
    length, "İ" lower-cased to two), where no such map exists."""
    folded = fold_chinese(text)
    lowered = folded.lower()
    if not len(text) == len(folded) == len(lowered):
        return None
    words: list[str] = []
    where: list[int] = []
    # normalise's "punctuation to one space, then split" is a join of the runs of \w
    for run in re.finditer(r"\w+", lowered):
        if words:
            where.append(run.start() - 1)  # the joining space: the gap before the run
        words.append(run.group())
        where.extend(range(run.start(), run.end()))
    return " ".join(words), where


def _quote_found(sentence: str, norm: str, start: int, end: int) -> str:
    """`norm[start:end]`, a pattern's match (or the folded remainder) to quote, as it is
    written in `sentence`: what a pattern took of the answer's words may hold a secret, which
    the masker recognises as written, not lower-cased and split at its punctuation. `norm` is
    `normalise(sentence)` or its end (a list marker dropped: "1. Read it" -> "read it");
    otherwise, and where folding has no map, the sentence's head is quoted instead."""
    while start < end and norm[start] == " ":
        start += 1
    while end > start and norm[end - 1] == " ":
        end -= 1
    folding = _folding(sentence)
    if start == end or folding is None or not folding[0].endswith(norm):
        return _quote(sentence)
    full, where = folding
    base = len(full) - len(norm)
    first, last = where[base + start], where[base + end - 1] + 1
    # a match starts where a folded word does, which may be inside a secret ("sk-proj-…" is
    # "sk proj …"): quoted from the secret's start instead, whole or not at all
    first = next((s for s, e, _ in spans(sentence) if s < first < e), first)
    # cut at the match's end, moved off any secret it would split
    return quote_whole(sentence[first:], min(last - first, QUOTE_CHARS)).rstrip()


def _search(pattern: re.Pattern[str], rest: str, joined: str) -> tuple[int, int] | None:
    """Where `pattern` matches `rest`, or else `joined` (`rest` with the spaces between Chinese
    characters taken out), as a span of `rest`."""
    found = pattern.search(rest)
    if found is not None:
        return found.span()
    found = pattern.search(joined)
    if found is None:
        return None
    gaps = {m.start() for m in _CJK_GAP.finditer(rest)}
    kept = [i for i in range(len(rest)) if i not in gaps]  # kept[j]: rest's index of joined[j]
    start, end = found.span()
    if start == end:
        return start, start
    return kept[start], kept[end - 1] + 1


def continues(sentence: str) -> bool:
    """ "Let me analyze..." with the work following (seed 004's own example)."""
    return _CONTINUES.match(sentence) is not None


def clarification_in(sentence: str, norm: str) -> str | None:
    """A question to the user, or a request for what is wanted: the phrase, or the question."""
    fam = families()
    hit = first(norm, fam.clarification)
    if hit:
        return hit
    for pattern in fam.clarification_patterns:
        found = pattern.search(norm)
        if found and not _CONCRETE.search(sentence):
            return _quote_found(sentence, norm, *found.span())  # "把…发给我" takes its words
    # a question to the user (a translated or quoted question in another language is not; one
    # that names code, "Are you looking for `df.rename(...)`?", carries the answer)
    if _answers_in_code(sentence):
        return None
    if sentence.rstrip().endswith(("?", "？")) and _TO_THE_USER.search(
        strip_acknowledgements(norm)
    ):
        return _quote(sentence)
    return None


def states_content(norm: str, yes_no_question: bool) -> bool:
    """A sentence that is an answer however short or plain: "Yes." to a yes/no question, or
    a limitation with its reason ("I don't have access to live data, so …")."""
    fam = families()
    if yes_no_question:
        bare = strip_acknowledgements(norm)
        if norm in fam.answers_to_yes_no or bare in fam.answers_to_yes_no:
            return True
        head = norm.split(" ", 1)[0]
        if head in fam.answers_to_yes_no or any(
            norm.startswith(a) for a in fam.answers_to_yes_no if CJK.search(a) and len(a) > 1
        ):
            return True  # "No — it's O(n log n)", "不对，多了一个 @"
    return any(p.search(norm) for p in fam.limitations)


def asks_for_missing_input(response: str, prompt: str) -> bool:
    """The answer asks for material the prompt points at but does not contain ("Summarize the
    attached file" with nothing attached): asking is then the only right answer."""
    if len(prompt) >= 200 or "```" in prompt or _QUOTED.search(prompt):
        return False
    norm = normalise(response)
    return any(p.search(norm) for p in families().missing_input)


def asks_for_text(prompt: str) -> bool:
    """The prompt asks for a piece of text made of courtesy (a greeting, an introduction), or
    to translate or rewrite a quoted one: courtesy in the answer is then the product."""
    fam = families()
    norm = normalise(prompt)
    if any(p.search(norm) for p in fam.text_requests):
        return True
    quoted = _QUOTED.search(prompt)
    return quoted is not None and any(p.search(norm) for p in fam.rewrites)


def is_the_requested_text(response: str, prompt: str) -> bool:
    """For a prompt that asks for a text: the answer is that text, not talk about the request
    ("Sure! I'd be happy to translate that", "which text should I translate?"). Translating
    filler ("Let me think step by step.") gives filler of about the same length: the product."""
    norm = normalise(response)
    if not norm:
        return False
    # "以下是较正式的版本：" / "Here is the rewrite:" then the text: what follows the lead-in
    lead_in = _LEAD_IN.search(response)
    if lead_in is not None:
        after = response[lead_in.end() :]
        if len(normalise(after)) >= 4 and not clarification_in(after.strip(), normalise(after)):
            return True
    quoted = _QUOTED.search(prompt)
    source = normalise(quoted.group(0)) if quoted else ""
    fam = families()
    prompt_norm = normalise(prompt)
    if any(p.search(prompt_norm) for p in fam.text_requests):
        # a greeting or an introduction is courtesy and a question: only talk about the request
        # or an announcement ("Generating your greeting now!") is not the product
        # its "How can I help you?" is part of it; a question about specifics is not
        specific = any(
            q.rstrip().endswith(("?", "？")) and not first(normalise(q), fam.clarification)
            for q in re.split(r"(?<=[?？])|\n", response)
            if q.strip()
        )
        return not (
            specific
            or announcement_in(norm)
            or any(p.search(norm) for p in fam.talks_about_the_request)
        )
    if _REFUSAL.search(norm):
        return False  # "I'm sorry, but I can't help with that." translates nothing
    echoes = bool(source) and bool(announcement_in(source) or filler_in(source, source))
    echoes = echoes and len(response) <= 3 * len(source) + 20
    if (announcement_in(norm) or filler_in(norm, norm)) and not echoes:
        return False
    asked = quoted is not None and ("?" in quoted.group(0) or "？" in quoted.group(0))
    questions = [q for q in re.split(r"(?<=[?？])", response) if q.strip()]
    if not asked and any(clarification_in(q, normalise(q)) for q in questions):
        return False
    return not any(p.search(norm) for p in fam.talks_about_the_request)


def vague_step(sentence: str, norm: str) -> str | None:
    """A plan item with nothing concrete in it ("2. Locate the config loader", "第一步：理解需求"):
    a plan of such steps, never carried out, did no work."""
    if _CONCRETE.search(sentence):
        return None
    return next((_quote(sentence) for p in families().vague_steps if p.search(norm)), None)


def reports_outcome(norm: str) -> bool:
    """The sentence reports what happened to a step ("步骤2文件读取失败，后续分析无法进行",
    "Step 2 failed to read the file"): a result, even in a plan step's or an announcement's
    form. Not when the words before the outcome say the agent will look into it ("Let me find
    out why the build failed", "我来排查构建为什么失败"): that failure is the task, not news."""
    fam = families()
    rest = strip_acknowledgements(norm)
    for pattern in fam.outcomes:
        found = pattern.search(rest)
        if found and not any(p.search(rest[: found.start()]) for p in fam.looks_into):
            return True
    return False


def announcement_in(norm: str) -> bool:
    """The folded sentence announces work. Whether, not what: it has no sentence to quote
    from, and a folded quote carries a secret past the masker (see `_quote_found`)."""
    if reports_outcome(norm):
        return False
    rest = strip_acknowledgements(norm)
    joined = _CJK_GAP.sub("", rest)
    return any(p.search(rest) or p.search(joined) for p in families().announcements)


def asks_for_code(prompt: str) -> bool:
    """ "Write a function that…", "写一个快速排序函数": the deliverable is code."""
    norm = normalise(prompt)
    return any(p.search(norm) for p in families().code_requests)


def asks_who_it_is(prompt: str) -> bool:
    """ "Who are you?", "你是哪个模型": a self-introduction is then the answer."""
    norm = normalise(prompt)
    return any(p.search(norm) for p in families().identity_questions)


def filler_in(sentence: str, norm: str, *, about_itself: bool = False) -> str | None:
    """What makes a sentence filler, or None when it says something. A Chinese sentence is
    filler when each of its clauses is ("好的，这是一个乘法运算，我来帮您计算。"): filler and
    work share one sentence there far more often than in English."""
    hit = _filler_in(sentence, norm, about_itself)
    if hit or not CJK.search(sentence):
        return hit
    clauses = [c for c in _CLAUSE.split(sentence) if normalise(c)]
    if len(clauses) < 2:
        return None
    hits = [_filler_in(c, normalise(c), about_itself) for c in clauses]
    return hits[0] if all(hits) else None


def _filler_in(sentence: str, norm: str, about_itself: bool = False) -> str | None:
    fam = families()
    if fam.tool_echo.search(sentence):
        return _quote(sentence) or "tool call"  # "⏺ Read(src/app.py)": a call, not its result
    hit = first(norm, fam.filler)
    if hit:
        return hit
    rest = strip_acknowledgements(norm)
    if not rest:
        return norm  # acknowledgements only: the family's own words, nothing of the answer's
    if _CONTINUES.match(sentence):
        return None
    # what a pattern found in `rest` (the end of `norm`) is quoted from the sentence as written
    at = len(norm) - len(rest)
    joined = _CJK_GAP.sub("", rest)  # "抱歉 我无法帮助您" -> "抱歉我无法帮助您"
    for pattern in () if reports_outcome(norm) else fam.announcements:
        span = _search(pattern, rest, joined)
        if span:
            return _quote_found(sentence, norm, at + span[0], at + span[1])
    if _CONCRETE.search(sentence):
        return None  # "It's a known issue in pandas 2.0: use .loc" says something
    patterns = fam.filler_patterns if about_itself else (*fam.filler_patterns, *fam.capability)
    for pattern in patterns:
        span = _search(pattern, rest, joined)
        if span:
            return _quote_found(sentence, norm, at + span[0], at + span[1])
    latin = re.findall(r"[a-z0-9]+", rest)
    if any(w not in fam.meta_words for w in latin):
        return None
    # Chinese: what is left once the words of assistant-speak are gone
    if len(CJK.findall(fam.meta_hanzi.sub("", rest))) <= 1:
        return _quote_found(sentence, norm, at, len(norm))
    return None
