"""Contract events for one request, with step indexes, event ids and clipping filled in."""

from __future__ import annotations

import json
import secrets
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from tracejudge.client.interventions import (
    InterventionReader,
    InterventionStop,
    OnIntervention,
    RequestWatch,
)
from tracejudge.models.errors import InvalidEvent
from tracejudge.models.events import (
    LONG_TEXT_LIMIT,
    SUMMARY_LIMIT,
    Outcome,
    SessionEnd,
    clip,
    describe,
)
from tracejudge.models.outputs import Intervention
from tracejudge.models.signing import sign_outcome

Emit = Callable[[dict[str, Any]], bool]  # queue an event; False: the queue was full (dropped)


class Recorder:
    """One request: `task_started` when made, then steps in order, `final_response` last.

    Every event gets the request id (the message key), a step index, an event id derived from
    both (so a resend is recognised as a duplicate) and texts clipped to the contract's limits
    before they leave the process.

    Each step takes an optional `actor`: in a multi-agent run, who took it (the agent, or the
    tool executor, that spoke or acted; a failed verdict's blame names it). Omitted, none is
    sent: the step is the request's agent's.
    """

    def __init__(
        self,
        emit: Emit,
        goal: str,
        *,
        request_id: str | None = None,
        agent_name: str | None = None,
        agent_version: str | None = None,
        session_key: str | None = None,
        planned_steps: list[str] | None = None,
        trace_id: str | None = None,
        span_id: str | None = None,
        parent_request_id: str | None = None,
        reflection_round: int = 0,
        run_token: str | None = None,
        reader: InterventionReader | None = None,
        on_intervention: OnIntervention | None = None,
    ) -> None:
        """`agent_version`: the agent's build, prompt or config revision, so its verdicts can be
        compared before and after a change. `trace_id`/`span_id` (W3C hex): the OpenTelemetry
        span the request runs in, so its evaluation can be exported linked to it; taken from the
        current span when the agent uses OpenTelemetry and none is given.
        `parent_request_id`/`reflection_round`: the request this run follows up and its round
        (client/reflections.py sets both). `run_token`: set when the same request id may be
        run again (a follow-up redone after a crash): the steps' event ids carry it, so the
        redone run's steps are not taken for duplicates of the interrupted run's; the
        `task_started` keeps the plain id, so its resend is one.
        `reader`: the tracer's interventions reader; the request is watched from before its
        `task_started` leaves, and `on_intervention` is called (on the reader's thread) for
        each intervention that arrives for it (client/interventions.py)."""
        self.request_id = request_id or uuid.uuid4().hex
        self._token = run_token
        if trace_id is None:
            trace_id, span_id = current_span_ids()
        self.started_at = time.time()
        self._emit = emit
        given = (
            ("agent_name", agent_name),
            ("agent_version", clip(agent_version, 128) if agent_version else None),
            ("session_key", session_key),
        )
        # this run's, on each of its events: the worker signs it into the run's control
        # records, and the watch refuses a record of another run of the same request id
        self.run_nonce = secrets.token_urlsafe(12)
        self._common = {k: v for k, v in given if v}
        self._common["run_nonce"] = self.run_nonce
        self._step = 0
        self.dropped = 0
        self.finished = False
        self._reader = reader
        # watched before the first event leaves: the worker cannot answer an event sooner
        self._watch: RequestWatch | None = (
            None
            if reader is None
            else reader.watch(self.request_id, on_intervention, run_nonce=self.run_nonce)
        )
        self._send(
            "task_started",
            goal=clip(goal, LONG_TEXT_LIMIT),
            planned_steps=[clip(s, SUMMARY_LIMIT) for s in (planned_steps or [])][:100],
            trace_id=trace_id,
            span_id=span_id,
            parent_request_id=parent_request_id,
            reflection_round=reflection_round or None,
        )

    def reasoning(
        self,
        summary: str,
        *,
        phase: str = "plan",
        action: str | None = None,
        error: str | None = None,
        usage: Usage | None = None,
        actor: str | None = None,
    ) -> None:
        """A reasoning step: a short summary of the thought, never the whole chain; `usage`:
        what the model call that produced it cost (see `model_usage`)."""
        self._send(
            "reasoning_step",
            phase=phase,
            intent_summary=clip(summary, SUMMARY_LIMIT),
            action=_clipped(action),
            error=_clipped(error),
            usage=usage,
            actor=_actor(actor),
        )

    def model_call(
        self,
        model: str,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cost_usd: float | None = None,
        latency_ms: float | None = None,
        summary: str | None = None,
        actor: str | None = None,
    ) -> None:
        """One model call, as a reasoning step that carries its usage (the evaluation sums
        them per request)."""
        self.reasoning(
            summary or f"called {model}",
            usage=model_usage(model, input_tokens, output_tokens, cost_usd, latency_ms),
            actor=actor,
        )

    def tool_call(
        self,
        tool: str,
        *,
        success: bool,
        args: Any = None,
        result: Any = None,
        error: str | None = None,
        latency_ms: float | None = None,
        actor: str | None = None,
    ) -> None:
        self._send(
            "tool_call",
            tool=tool[:256],
            success=success,
            args_summary=_clipped(
                args if args is None or isinstance(args, str) else json.dumps(args, default=str)
            ),
            result_preview=_clipped(
                result
                if result is None or isinstance(result, str)
                else json.dumps(result, default=str)
            ),
            error=_clipped(error),
            latency_ms=latency_ms,
            actor=_actor(actor),
        )

    def user(self, text: str, *, actor: str | None = None) -> None:
        """A later turn of the user in a conversation."""
        self._send("user_message", text=clip(text, SUMMARY_LIMIT), actor=_actor(actor))

    def iteration(
        self,
        iteration: int,
        *,
        response: str = "",
        observation: str = "",
        exec_success: bool | None = None,
        max_iterations: int | None = None,
        usage: Usage | None = None,
        actor: str | None = None,
    ) -> None:
        """One round of an iterative loop (early-stop decisions follow these)."""
        self._send(
            "iteration",
            iteration=iteration,
            max_iterations=max_iterations,
            response=clip(response, LONG_TEXT_LIMIT),
            observation=clip(observation, LONG_TEXT_LIMIT),
            exec_success=exec_success,
            usage=usage,
            actor=_actor(actor),
        )

    def final(
        self,
        output: str,
        *,
        usage: Usage | None = None,
        stopped_by: str | None = None,
        actor: str | None = None,
        error: str | None = None,
    ) -> None:
        """The answer: ends the request, which is judged at once. `stopped_by`: the
        intervention_id the run stopped for, when it did (its evaluation says so). `error`:
        the run ended by an error (an exception out of the agent): it failed, whatever
        `output` says."""
        self._send(
            "final_response",
            output=clip(output, LONG_TEXT_LIMIT),
            usage=usage,
            stopped_by=stopped_by,
            error=None if error is None else clip(error, SUMMARY_LIMIT),
            actor=_actor(actor),
            # what was done with this request's control records: how the operator sees an
            # agent whose keys are not the worker's (tracejudge status, /health)
            control=(
                None
                if self._watch is None or self._reader is None
                else self._watch.seen(getattr(self._reader, "keys", None) is not None)
            ),
        )
        self.finished = True
        if self._reader is not None:  # kept a little longer: one on the last steps still lands
            self._reader.forget(self.request_id)

    def end_session(self, reason: str | None = None) -> bool:
        """The conversation this request belongs to (its `session_key`) ends with it: the
        session's verdict is made final now, with this request's turn, instead of after the
        worker's idle time. Call it after `final`. False (nothing sent) for a request made
        without a session_key, or when the event was dropped."""
        key = self._common.get("session_key")
        if not key:
            return False
        event = session_end_event(key, self.request_id, self._common.get("agent_name"), reason)
        if self._emit(event):
            return True
        self.dropped += 1
        return False

    def should_stop(self) -> bool:
        """True once an intervention with action "stop" arrived for this request (a budget
        crossed, a loop found). Never blocks: a read of what the reader's thread kept (and a
        look that the thread is alive: one found dead is started again)."""
        if self._watch is None:
            return False
        if self._watch.stop is None and self._reader is not None and not self.finished:
            self._reader.keep_alive()
        return self._watch.stop is not None

    @property
    def stop_reason(self) -> Intervention | None:
        """The first intervention that said stop, if any."""
        return None if self._watch is None else self._watch.stop

    @property
    def interventions(self) -> list[Intervention]:
        """Every intervention that arrived for this request (stop and steer), in order."""
        return [] if self._watch is None else list(self._watch.interventions)

    def pending_steers(self) -> list[Intervention]:
        """The interventions with action "steer" that arrived and were not handed out yet, in
        order, each handed out once (whoever asks first, from any thread): for the agent's next
        model call, in words from `steer_text` (client/interventions.py). Never blocks. The
        LangChain handler and the Agents SDK processor ask before each model call they feed."""
        return [] if self._watch is None else self._watch.take_steers()

    def raise_if_stopped(self) -> None:
        """Raise `InterventionStop` when `should_stop()`: for code that ends a run by raising."""
        stop = self.stop_reason
        if stop is not None:
            raise InterventionStop(stop)

    def _send(self, kind: str, **fields: Any) -> None:
        step = self._step
        self._step += 1
        event = {
            "type": kind,
            "request_id": self.request_id,
            "step_index": step,
            "event_id": (
                f"{self.request_id}:{self._token}:{step}"
                if self._token and step
                else f"{self.request_id}:{step}"
            ),
            "ts": time.time(),
            **self._common,
            **{k: v for k, v in fields.items() if v is not None},
        }
        if not self._emit(event):
            self.dropped += 1


Usage = dict[str, Any]  # the contract's ModelUsage fields


def current_span_ids() -> tuple[str | None, str | None]:
    """The current OpenTelemetry span's trace and span id, if the agent has OpenTelemetry
    loaded and a span is active (never imported here: an agent without it pays nothing)."""
    otel = sys.modules.get("opentelemetry.trace")
    if otel is None:
        return None, None
    context = otel.get_current_span().get_span_context()
    if not context.is_valid:
        return None, None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def model_usage(
    model: str | None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cost_usd: float | None = None,
    latency_ms: float | None = None,
) -> Usage:
    """The `usage` of a step, with the fields that are known."""
    given = {
        "model": None if model is None else model[:256],
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd": cost_usd,
        "latency_ms": latency_ms,
    }
    return {k: v for k, v in given.items() if v is not None}


def outcome_event(
    request_id: str,
    *,
    ok: bool | None = None,
    score: float | None = None,
    source: str = "user",
    note: str | None = None,
    key: str | None = None,
    session: tuple[str | None, str] | None = None,
) -> dict[str, Any]:
    """The contract's `outcome` event for a request, validated as the worker validates it (so
    a bad one is refused here, where the caller can be told, not dead-lettered later);
    InvalidEvent saying why not. `note` is clipped to the contract's limit. `key`: the
    source's key in the worker's TRACEJUDGE_OUTCOME_KEYS, which signs the event. `session`:
    (agent_name, session_key) when the truth is about that conversation, not one request."""
    given: dict[str, Any] = {"ok": ok, "score": score, "source": source, "note": note}
    if session is not None:
        given.update(subject="session", agent_name=session[0], session_key=session[1])
    value = {
        "type": "outcome",
        "request_id": request_id,
        "ts": time.time(),
        **{k: v for k, v in given.items() if v is not None},
    }
    try:
        event = Outcome.model_validate(value)
    except ValidationError as exc:
        raise InvalidEvent("invalid_fields", describe(exc)) from exc
    dumped = event.model_dump(exclude_none=True)
    if not dumped["clipped"]:
        del dumped["clipped"]
    return dumped if key is None else sign_outcome(dumped, key)


def session_end_event(
    session_key: str,
    request_id: str | None = None,
    agent_name: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """The contract's `session_end` event, validated as the worker validates it; InvalidEvent
    saying why not. `request_id`: the session's last request (its verdict waits for that
    request's turn); none: an id of its own (the session ends with the turns already in)."""
    value = {
        "type": "session_end",
        "request_id": request_id or f"session-end-{uuid.uuid4().hex}",
        "session_key": session_key,
        "agent_name": agent_name,
        "reason": reason,
        "ts": time.time(),
    }
    try:
        event = SessionEnd.model_validate({k: v for k, v in value.items() if v is not None})
    except ValidationError as exc:
        raise InvalidEvent("invalid_fields", describe(exc)) from exc
    dumped = event.model_dump(exclude_none=True)
    if not dumped["clipped"]:
        del dumped["clipped"]
    return dumped


def _clipped(text: str | None) -> str | None:
    return None if text is None else clip(text, SUMMARY_LIMIT)


def _actor(actor: str | None) -> str | None:
    """Who took a step, within the contract's 256 characters; empty: none."""
    return actor[:256] if actor else None
