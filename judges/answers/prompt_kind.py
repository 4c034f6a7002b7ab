"""Is a prompt a concrete task (a question alone is then not an answer) or a simple one?"""

from __future__ import annotations

import re

from tracejudge.judges.answers.families import CJK, Families, families, first, normalise


def is_chinese(text: str) -> bool:
    return len(CJK.findall(text)) >= max(1, len(text) // 10)


def prompt_is_complex(prompt: str) -> bool:
    """A real task: long; a task verb with something to act on ("fix this", "翻译这段话";
    a bare "Summarize", "翻译" or "test" is not); or a specific question."""
    if len(prompt) >= 120 or (is_chinese(prompt) and len(prompt) >= 40):
        return True
    fam = families()
    # a placeholder or nothing after the colon is nothing to act on ("翻译成英文：")
    prompt = re.sub(r"\[[^\]]*\]|<[^>]*>|\{[^}]*\}", " ", prompt).rstrip().rstrip(":：").rstrip()
    norm = normalise(prompt)
    verb = first(norm, fam.task_verbs)
    if verb is not None and _has_object(norm, verb, fam):
        return True
    words = norm.split()
    # "把 X 换算成 Y", "帮我 …": a Chinese request with something in it
    hanzi = len(CJK.findall(norm))
    if hanzi >= 6 and any(m in norm.replace(" ", "") for m in fam.task_markers_zh):
        rest = norm.replace(" ", "")
        for m in fam.task_markers_zh:
            rest = rest.replace(m, "")
        if len(CJK.findall(rest)) >= 4:
            return True
    if CJK.search(norm):
        asks = any(q in norm for q in fam.question_words if CJK.search(q))
        return asks and len(CJK.findall(norm)) >= 6
    if not words or words[0] not in fam.question_words:
        return False
    topic = [w for w in words if len(w) >= 3 and w not in fam.not_an_object | {*fam.question_words}]
    return len(topic) >= 2


def _has_object(norm: str, verb: str, fam: Families) -> bool:
    if CJK.search(verb):
        rest = norm.replace(" ", "").replace(verb, "", 1)
        for word in sorted(fam.not_an_object, key=len, reverse=True):
            rest = rest.replace(word, "")
        return len(rest) >= 1
    rest = re.sub(rf"(?<![a-z0-9]){re.escape(verb)}(?![a-z0-9])", " ", norm, count=1)
    return any(word not in fam.not_an_object for word in rest.split())
