"""A session's turns as one run: the first turn's goal is the conversation's, each later turn's
goal is the user's message, each turn's answer but the last the agent's reply, the last turn's
answer the conversation's final response. Pure: the same turns, the same run.

A turn is a closed request's events (contract events, as dicts or validated), in its order;
`turns` are in the order they closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracejudge.models.events import Event, FinalResponse, TaskStarted, parse_event
from tracejudge.models.window import ClosedBy, Window, assemble_window

Turn = Sequence[Event | dict[str, Any]]


def _event(value: Event | dict[str, Any]) -> Event:
    return parse_event(value) if isinstance(value, dict) else value


def session_window(
    session_key: str, turns: Sequence[Turn], closed_by: ClosedBy = "final_response"
) -> Window:
    """The conversation as one window: steps numbered in turn order."""
    return assembled(session_key, turns, closed_by)[0]


# a step of the assembled conversation -> (its turn, 0-based; its step_index in its request)
Origins = dict[int, tuple[int, int]]


def assembled(
    session_key: str, turns: Sequence[Turn], closed_by: ClosedBy = "final_response"
) -> tuple[Window, Origins]:
    """The conversation as one window, and where each of its steps came from."""
    origins: Origins = {}
    events: list[Event] = []
    step = 0
    # the conversation's answer is the last one the agent gave: a last turn without one (the
    # user's closing words, a hand-off call) leaves the turn before it as the answer
    final: Event | None = None
    final_step = 0
    answered = [n for n, turn in enumerate(turns) if any(_is_final(e) for e in turn)]
    last = answered[-1] if answered else len(turns) - 1
    for n, turn in enumerate(turns):
        for raw in turn:
            event = _event(raw)
            fields = event.model_dump(exclude_none=True)
            fields["request_id"] = session_key
            if isinstance(event, TaskStarted):
                if n == 0:  # the conversation's goal, and its first turn
                    events.append(parse_event({**fields, "step_index": 0}))
                step += 1
                origins[step] = (n, event.step_index or 0)
                said = {"type": "user_message", "request_id": session_key, "step_index": step}
                events.append(parse_event({**said, "text": event.goal or ""}))
            elif isinstance(event, FinalResponse):
                if n == last:
                    final = parse_event({**fields, "step_index": 0})  # numbered once all is in
                    final_step = event.step_index or 0
                else:
                    step += 1
                    origins[step] = (n, event.step_index or 0)
                    events.append(
                        parse_event({"type": "reasoning_step", "request_id": session_key,
                                     "step_index": step, "phase": "synthesis",
                                     "intent_summary": event.output or "", "action": "respond"})
                    )  # fmt: skip
            else:
                step += 1
                origins[step] = (n, getattr(event, "step_index", 0) or 0)
                events.append(parse_event({**fields, "step_index": step}))
    if final is not None:
        origins[step + 1] = (last, final_step)
        events.append(final.model_copy(update={"step_index": step + 1}))
    window = assemble_window(
        session_key, events, closed_by=closed_by, step_count=step, steps_dropped=0
    )
    return window, origins


def _is_final(value: Event | dict[str, Any]) -> bool:
    kind = value.get("type") if isinstance(value, dict) else value.type
    return kind == "final_response"
