"""What the conversation with the user shows: actions left pending, confirmations not acted on,
and state changes made without the user's go-ahead.

An agent that acts for a user (books, cancels, changes, sends) is expected to read the action
back, get an explicit yes, do it, and report the result. Runs that end before the last of those
("Would you like to proceed with this cancellation?", "I will proceed with downgrading…", "To
proceed, I need your reservation ID") did not reach the goal, whatever the tone of the answer;
a yes the user gave that no successful call followed is the same. A state change made right
after a turn in which the user only asked, chose or supplied details (not a go-ahead) is the
commonest way such agents act on a wrong reading of the request: a process finding that lowers
the score without deciding `incomplete` by itself.

Offers of a hand-off ("Would you like me to transfer you to a human agent?") are not pending
actions: they are how a correct refusal ends. Conditions ("once you have the ID, I'll …") are
left alone too: the agent is not announcing work it is about to do.
"""

from __future__ import annotations

import re

from tracejudge.judges.masking.clipping import quote_whole
from tracejudge.judges.rules.claims import reads_only
from tracejudge.judges.text.kinds import prose
from tracejudge.judges.text.sentences import sentences
from tracejudge.models.events import ReasoningStep, ToolCall, UserMessage
from tracejudge.models.window import Window

# Base forms of the actions an agent performs for a user (the past forms live in claims.py).
ACTION_VERBS: tuple[str, ...] = (
    "book",
    "reserve",
    "rebook",
    "cancel",
    "refund",
    "change",
    "update",
    "modify",
    "upgrade",
    "downgrade",
    "switch",
    "reschedule",
    "move",
    "send",
    "issue",
    "create",
    "add",
    "remove",
    "delete",
    "submit",
    "process",
    "pay",
    "charge",
    "purchase",
    "order",
    "apply",
    "deploy",
    "merge",
    "commit",
    "finali[sz]e",
    "complete",
    "proceed",
    "go ahead",
)
ACTION_VERBS_ZH: tuple[str, ...] = (
    "预订",
    "预定",
    "取消",
    "退款",
    "修改",
    "更改",
    "改签",
    "升级",
    "降级",
    "发送",
    "创建",
    "添加",
    "删除",
    "提交",
    "支付",
    "办理",
    "处理",
    "继续",
)
_VERB = "(?:" + "|".join(ACTION_VERBS) + ")"
_VERB_ZH = "(?:" + "|".join(ACTION_VERBS_ZH) + ")"
_ACTION = re.compile(rf"\b{_VERB}(?:e?s|e?d|ing)?\b|{_VERB_ZH}", re.IGNORECASE)

# "I will proceed with…", "Let me cancel…", "Let's continue with booking…", "我将为您取消…"
_ANNOUNCED = re.compile(
    r"\b(?:i|we)(?:'ll| will| am going to|'m going to| shall)\s+"
    r"(?:(?:now|first|then|also|next|go ahead and|(?:proceed|continue) (?:to|with))\s+)*"
    rf"{_VERB}\b"
    rf"|\blet me (?:now |first |go ahead and )?{_VERB}\b"
    r"|\blet'?s (?:continue|proceed|go ahead) with\b"
    # an offer to act is pending too: "I can proceed with issuing the $50 certificate"
    r"|\b(?:i|we) can (?:now )?(?:proceed|go ahead) (?:with|to)\b"
    r"|\bi(?:'m| am) (?:now )?(?:going to |about to )?(?:proceed|process|cancel|book|updat|modif)"
    rf"|(?:我|我们)(?:将|会|马上|现在|这就)(?:为您|帮您|给您)?{_VERB_ZH}",
    re.IGNORECASE,
)
# "Would you like to proceed with this cancellation?", "Please confirm, and I'll proceed."
_ASKS_GO_AHEAD = re.compile(
    r"\b(?:would you like (?:me )?to|do you want (?:me )?to|shall i|should i|may i|"
    r"are you sure|ready to proceed|(?:wish|want) to proceed)\b"
    # "confirm" asks for a go-ahead when its object is the action, not a fact ("the date")
    r"|\bconfirm (?:that |if |whether )?(?:you(?:'d| would)? (?:like|want)|this|these|"
    r"the (?:change|booking|cancellation|update|upgrade|order|payment|details)s?\b|to proceed)"
    r"|\bplease confirm\s*(?:[,.!]|and\b|$)"
    r"|请确认(?:是否|一下)?|是否(?:确认|继续|需要我)|要不要",
    re.IGNORECASE,
)
# "To proceed with the cancellation, I need your reservation ID."
_NEEDS_INPUT = re.compile(
    r"\b(?:to (?:proceed|continue|complete|process|finali[sz]e)|before (?:i|we) (?:can )?"
    r"(?:proceed|continue))\b[^.!?\n]{0,80}\b(?:i(?:'ll| will)? need|please (?:provide|confirm)|"
    r"could you (?:please )?(?:provide|confirm|share|tell))"
    r"|为了(?:继续|办理|完成)[^。！？\n]{0,30}(?:需要|请提供)",
    re.IGNORECASE,
)
_HANDOFF_WORDS = re.compile(
    r"transfer|human|(?:live|real|another) agent|representative|supervisor|specialist|"
    r"customer (?:service|support)|人工|客服",
    re.IGNORECASE,
)
_CONDITION = re.compile(
    r"\b(?:if|once|when|after|as soon as|whenever)\b[^.!?]*$|(?:如果|等|一旦)", re.I
)
# The user's explicit go-ahead, at the start of the turn or said outright.
_GO_AHEAD = re.compile(
    r"^\W*(?:yes|yeah|yep|yup|sure|ok(?:ay)?|correct|confirm(?:ed)?|i confirm|"
    r"please (?:go ahead|proceed|do)|go ahead|proceed|that(?:'s| is) (?:correct|right|fine)|"
    r"sounds (?:good|great)|let'?s do (?:it|that)|do it|absolutely|definitely)\b"
    r"|\b(?:please (?:go ahead|proceed)|go ahead|i confirm|yes,? please|"
    r"(?:i'd like|i would like|i want|let'?s) (?:to )?proceed)\b"
    r"|^\W*(?:是的|是|好的|好|可以|确认|没问题|行|对)|请(?:继续|办理|执行)|确认(?:办理|取消|修改|预订)",
    re.IGNORECASE,
)
# The user takes it back, or the agent explains why it could not be done: the yes is spent.
_WITHDRAWN = re.compile(
    r"\b(?:no|nope|never ?mind|hold off|don'?t|do not|not now|not (?:go|proceed)|forget it|"
    r"i(?:'ll| will) (?:think|wait|pass)|won'?t be able|can'?t afford|above my budget|"
    r"keep (?:it|things|the current))\b|算了|不用了|先不|不要了",
    re.IGNORECASE,
)
_EXPLAINED = re.compile(
    r"\b(?:unable|cannot|can'?t|could(?:n'?t| not)|unfortunately|policy|no longer|"
    r"not (?:possible|allowed|permitted|eligible|able|available))\b|无法|不能|不允许|抱歉",
    re.IGNORECASE,
)


def _is_question(sentence: str) -> bool:
    return sentence.endswith(("?", "？"))


def pending_action(text: str) -> str | None:
    """The sentence of a final answer that leaves the requested action pending, if any: an
    announced next action, a request for the user's go-ahead on an action, or a request for the
    inputs needed to proceed. Hand-off offers and conditional promises do not count."""
    parts = sentences(text)
    for i, sentence in enumerate(parts):
        if _HANDOFF_WORDS.search(sentence):
            continue
        announced = _ANNOUNCED.search(sentence)
        if announced and not _CONDITION.search(sentence[: announced.start()]):
            return quote_whole(sentence, 200)
        if _NEEDS_INPUT.search(sentence):
            return quote_whole(sentence, 200)
        if _ASKS_GO_AHEAD.search(sentence) and (
            _is_question(sentence) or re.search(r"\bconfirm\b|确认", sentence, re.I)
        ):
            # "Would you like me to do that?" points back at the sentence before it
            said = sentence + " " + (parts[i - 1] if i else "")
            if _HANDOFF_WORDS.search(said):
                continue
            if _ACTION.search(sentence):
                return quote_whole(sentence, 200)
    return None


def is_go_ahead(text: str) -> bool:
    """An explicit yes to what was proposed ("yes", "go ahead", "请继续"), as the rules read one."""
    return _GO_AHEAD.search(text) is not None


def is_state_change(call: ToolCall) -> bool:
    """A call that changes something for the user (not a look-up, not a hand-off to a human)."""
    return not reads_only(call.tool) and not _HANDOFF_WORDS.search(call.tool.replace("_", " "))


def unmet_confirmation(window: Window) -> str | None:
    """The user's last yes to an action the agent proposed, when no successful state change came
    after it, the user did not take it back and the agent never said why it could not be done:
    the confirmed work silently never happened."""
    steps = window.steps
    last_agent: str = ""
    unmet: str | None = None
    for i, step in enumerate(steps):
        if isinstance(step, ReasoningStep) and step.intent_summary:
            last_agent = prose(step.intent_summary)  # what the agent said, not code it showed
            continue
        if not isinstance(step, UserMessage) or not _GO_AHEAD.search(step.text):
            continue
        if _HANDOFF_WORDS.search(step.text) or not _proposes_action(last_agent):
            continue
        later = [s for s in steps[i + 1 :] if isinstance(s, ToolCall) and is_state_change(s)]
        withdrawn = any(
            isinstance(s, UserMessage) and _WITHDRAWN.search(s.text) for s in steps[i + 1 :]
        )
        told = [
            prose(s.intent_summary or "") for s in steps[i + 1 :] if isinstance(s, ReasoningStep)
        ]
        if window.final is not None:
            told.append(prose(window.final.output))
        explained = any(_EXPLAINED.search(text) for text in told)
        done = any(call.success for call in later)
        unmet = None if done or withdrawn or explained else quote_whole(step.text, 200)
    return unmet


def _proposes_action(agent_turn: str) -> bool:
    parts = sentences(agent_turn)
    for i, sentence in enumerate(parts):
        if not _ASKS_GO_AHEAD.search(sentence):
            continue
        said = sentence + " " + (parts[i - 1] if i else "")
        if _HANDOFF_WORDS.search(said):
            continue
        if _ACTION.search(said):
            return True
    return False


def is_conversation(window: Window) -> bool:
    """The user spoke after the opening request (a one-shot request is not a conversation)."""
    turns = window.user_turns
    opening = window.task.goal.strip() if window.task is not None else ""
    return bool(turns) and not (len(turns) == 1 and turns[0].text.strip() == opening)


def unconfirmed_changes(window: Window) -> list[str]:
    """For a conversation: the user turns that a state change directly followed without being
    an explicit go-ahead, one per change."""
    return [
        f"{call.tool} after '{quote_whole(turn, 120)}'" for call, turn in unconfirmed_calls(window)
    ]


def unconfirmed_calls(window: Window) -> list[tuple[ToolCall, str]]:
    """Each state change of a conversation made without a go-ahead, with the user turn it
    followed."""
    if not is_conversation(window):
        return []  # a one-shot request: the request itself is the instruction
    found: list[tuple[ToolCall, str]] = []
    last_user: str | None = None
    for step in window.steps:
        if isinstance(step, UserMessage):
            last_user = step.text
        elif (
            isinstance(step, ToolCall)
            and is_state_change(step)
            and last_user is not None
            and not _GO_AHEAD.search(last_user)
        ):
            found.append((step, last_user))
    return found
