"""What a final answer says happened, checked against what the trace shows.

Agents often end with a message that announces work no tool call did ("I have cancelled your
booking" after a cancel that failed, or none at all), admit that an attempt failed, hand the
user to a human, or answer with a placeholder ("TERMINATE"). Each finder returns the evidence
text it matched; the rule judge turns findings into `incomplete` and remaining steps.

Phrase families are general (any agent that acts through tools), English and Chinese. Claims
count only as affirmative statements: a sentence that is a question, or whose verb is negated
("has not been cancelled", "I cancelled nothing", "未取消"), claims nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracejudge.judges.masking.clipping import quote_whole
from tracejudge.judges.text.sentences import sentence_at, sentences

# action family -> (English past participles, Chinese verbs, tool-name stems that perform it)
ACTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "book": (
        ("booked", "reserved", "scheduled", "rebooked"),
        ("预订", "预定", "订好", "预约"),
        ("book", "reserv", "schedul"),
    ),
    "cancel": (("cancelled", "canceled"), ("取消",), ("cancel",)),
    "refund": (("refunded", "reimbursed"), ("退款", "退还"), ("refund", "reimburs", "cancel")),
    "change": (
        (
            "updated",
            "changed",
            "modified",
            "upgraded",
            "downgraded",
            "switched",
            "rescheduled",
            "renamed",
            "moved",
            "edited",
        ),
        ("修改", "更改", "更新", "升级", "降级", "改签", "变更"),
        (
            "updat",
            "chang",
            "modif",
            "edit",
            "upgrad",
            "downgrad",
            "switch",
            "reschedul",
            "renam",
            "move",
            "set",
            "patch",
        ),
    ),
    "send": (
        ("sent", "emailed", "notified", "messaged", "posted", "replied", "forwarded"),
        ("发送", "通知", "回复", "转发"),
        ("send", "email", "mail", "notif", "messag", "post", "reply", "forward"),
    ),
    "create": (
        ("created", "added", "opened", "registered", "submitted", "filed"),
        ("创建", "添加", "提交", "新建", "注册"),
        ("creat", "add", "new", "insert", "open", "regist", "submit", "file"),
    ),
    "delete": (
        ("deleted", "removed", "closed"),
        ("删除", "移除"),
        ("delet", "remov", "close", "drop"),
    ),
    "pay": (
        ("paid", "charged", "purchased", "ordered"),
        ("支付", "付款", "扣款", "购买", "下单"),
        ("pay", "charg", "purchas", "order", "checkout"),
    ),
    "transfer": (("transferred",), ("转账", "转移"), ("transfer",)),
    "deploy": (
        (
            "deployed",
            "committed",
            "merged",
            "pushed",
            "uploaded",
            "installed",
            "restarted",
            "saved",
            "fixed",
            "applied",
            "released",
        ),
        ("部署", "提交代码", "合并", "上传", "安装", "重启", "保存", "修复"),
        (
            "deploy",
            "commit",
            "merg",
            "push",
            "upload",
            "install",
            "restart",
            "save",
            "write",
            "apply",
            "releas",
            "fix",
            "edit",
            "patch",
            "run",
            "exec",
            "shell",
            "bash",
        ),
    ),
}

_PAST = {word: family for family, (words, _, _) in ACTIONS.items() for word in words}
_ZH = {word: family for family, (_, words, _) in ACTIONS.items() for word in words}
_PAST_RE = "|".join(sorted(_PAST, key=len, reverse=True))
_ZH_RE = "|".join(sorted(_ZH, key=len, reverse=True))

# The agent's own statements: first person, a perfect passive ("has been cancelled"), "is now",
# "successfully". A bare passive ("it was created on May 1", "the insurance was purchased")
# usually describes the record the agent looked up, not something it did.
_CLAIM_EN = re.compile(
    r"\b(?:(?:i|we)(?:'ve|'d| have| had)?|(?:has|have)(?: now| already)? been|"
    r"(?:is|are) now|successfully)\s+(?:(?:successfully|now|already|just|also)\s+){0,2}"
    rf"(?P<verb>{_PAST_RE})\b",
    re.IGNORECASE,
)
_CLAIM_ZH = re.compile(
    rf"(?:已经?|成功)(?:为您|帮您|给您|替您|为你|帮你)?(?P<verb>{_ZH_RE})|(?P<verb2>{_ZH_RE})成功"
)
_NEGATED_EN = re.compile(
    r"\b(?:not|n't|never|no longer|unable|cannot|couldn't|could not|failed|yet to)\b[^.!?\n]{0,40}$"
    r"|n't\s+(?:been\s+)?$",
    re.IGNORECASE,
)
_NOTHING_AFTER = re.compile(r"^\s*(?:nothing|none|no\b|anything)", re.IGNORECASE)
_NEGATED_ZH = re.compile(r"(?:未|没有?|尚未|无法|不能|失败)[^。！？\n]{0,6}$")


@dataclass(frozen=True)
class Claim:
    family: str
    evidence: str


def claimed_actions(text: str) -> list[Claim]:
    """Actions the text states as done, one per family, with the sentence that says so."""
    found: dict[str, Claim] = {}
    for stripped in sentences(text):
        if stripped.endswith(("?", "？")):
            continue
        for match in _CLAIM_EN.finditer(stripped):
            # only the words just before and after matter (and a bounded look keeps a long
            # sentence full of claims linear)
            before = stripped[max(0, match.start() - 80) : match.start()]
            after = stripped[match.end() : match.end() + 20]
            if _NEGATED_EN.search(before + match.group(0)[: -len(match.group("verb"))]):
                continue
            if re.search(r"\b(?:if|once|when|after|before|until|whether)\b[^,;]*$", before, re.I):
                continue  # a condition ("once it has been cancelled, ..."), not a statement
            if _NOTHING_AFTER.match(after):
                continue
            family = _PAST[match.group("verb").lower()]
            found.setdefault(family, Claim(family, quote_whole(stripped, 200)))
        for match in _CLAIM_ZH.finditer(stripped):
            if _NEGATED_ZH.search(stripped[max(0, match.start() - 20) : match.start()]):
                continue
            family = _ZH[match.group("verb") or match.group("verb2")]
            found.setdefault(family, Claim(family, quote_whole(stripped, 200)))
    return list(found.values())


_READ_ONLY = re.compile(
    r"^(?:get|search|list|find|lookup|look|fetch|read|query|check|view|show|describe|calculat|"
    r"think|browse|retriev|inspect|count|compute|estimat|validat|verify|ping|status|info)"
)


def reads_only(tool: str) -> bool:
    """Whether a tool's name says it only looks things up (get_user, search_flights)."""
    return _READ_ONLY.match(re.sub(r"[^a-z]", "", tool.lower())) is not None


def performs(tool: str, family: str) -> bool:
    """Whether a tool's name says it does this kind of action."""
    name = re.sub(r"[^a-z]", "", tool.lower())
    return any(stem in name for stem in ACTIONS[family][2])


# An attempt that failed, told in the past tense; present-tense refusals ("I can't change a
# basic economy ticket") are often the right answer and are left to the LLM judge.
_ADMITTED = re.compile(
    r"\b(?:i|we) (?:was|were)(?:n't| not)? unable to\b|\b(?:i|we) (?:could(?:n't| not)|"
    r"wasn't able to|was not able to|weren't able to|were not able to|failed to|did not manage "
    r"to|didn't manage to)\b|\b(?:could not|couldn't) be (?:completed|processed|"
    r"made|done|finished|applied|saved|sent|found)\b|\bwas unsuccessful\b|\b(?:did not|didn't) "
    r"go through\b|\b(?:an error|errors?) (?:occurred|prevented)\b"
    # no answer found: what an information-seeking agent says when it gives up
    r"|\b(?:i|we) (?:cannot|can't|am unable to|are unable to|could not|couldn't) (?:determine|"
    r"find|locate|identify|verify)\b|\b(?:cannot|could not|couldn't) be (?:determined|found|"
    r"located|identified|verified)\b|\bno (?:information|results?|data|answer) (?:was |were )?"
    r"found\b|\bi (?:do not|don't) know\b"
    r"|(?:^|[.:!?]\s*|\banswer\W{0,3})(?:unable to|cannot|could not) (?:determine|find|identify)\b"
    r"|未能|没能|操作失败|处理失败|执行失败|无法完成|无法确定|未找到|没有找到",
    re.IGNORECASE,
)
_HANDOFF = re.compile(
    r"\b(?:i(?:'ve| have)|has been|have been|you(?:'ve| have) been|i am|i'm) (?:now )?"
    r"(?:transferr(?:ed|ing)|escalat(?:ed|ing)|handed (?:you )?(?:over|off))\b[^.!?\n]{0,60}"
    r"\b(?:human|agent|representative|specialist|support|team|colleague)"
    r"|已(?:为您)?转(?:接)?(?:人工|客服)|转人工",
    re.IGNORECASE,
)
PLACEHOLDERS = frozenset(
    {
        "",
        "terminate",
        "done",
        "ok",
        "okay",
        "finished",
        "complete",
        "completed",
        "n/a",
        "none",
        "null",
        "task complete",
        "task completed",
        "完成",
        "结束",
        "好的",
    }
)


def admitted_failure(text: str) -> str | None:
    match = _ADMITTED.search(text)
    return sentence_at(text, match.start()) if match else None


def handoff(text: str) -> str | None:
    match = _HANDOFF.search(text)
    return sentence_at(text, match.start()) if match else None


def is_placeholder(text: str) -> bool:
    """An answer with nothing in it: empty, or a bare end marker ("TERMINATE", "Done.")."""
    return re.sub(r"[\W_]+", " ", text).strip().lower() in PLACEHOLDERS
