"""GET /health: ready only when the worker really consumes (assigned, recovered, not stalled)."""

from __future__ import annotations

from typing import Any

from tracejudge.streams.judge.consumer import JudgeRunner
from tracejudge.streams.kafka.brokers import BrokerCount
from tracejudge.streams.worker.context import WorkerContext


def health_report(
    ctx: WorkerContext,
    *,
    recovered: bool,
    rebalancing: bool,
    stalled: bool,
    broker_unreachable: bool = False,
    judge: JudgeRunner | None = None,
    brokers: BrokerCount | None = None,
) -> tuple[dict[str, Any], int]:
    """The body and HTTP status of /health. A worker that judges (`judge`: its judge consumer)
    is ready only once that consumer is assigned too: until then its judge jobs wait unread
    (before, /health said 200 about 30 s before the first job was taken). `brokers`: how many
    answer; some missing is "degraded" and still ready, none is for `broker_unreachable`
    to say."""
    judge_waiting = judge is not None and not judge.assigned
    up = ctx.liveness.assigned and recovered and not rebalancing and not judge_waiting
    ready = up and not stalled and not broker_unreachable
    status = "ok"
    if broker_unreachable:
        status = "broker_unreachable"
    elif stalled:
        status = "stalled"
    elif not ready:
        status = "starting"
    waiting_for = [
        what
        for what, missing in (
            ("input partitions assigned", not ctx.liveness.assigned),
            ("tables recovered", not recovered),
            ("rebalance to end", rebalancing),
            ("judge consumer assigned", judge_waiting),
        )
        if missing
    ]
    body: dict[str, Any] = {
        "status": status,
        "broker": "unreachable" if broker_unreachable else _broker_state(brokers),
        "assigned": ctx.liveness.assigned,
        "recovered": recovered,
        "rebalancing": rebalancing,
        "redis": ctx.lookup.enabled,
        "redis_errors": ctx.lookup.errors,
        "counters": dict(ctx.counters),
    }
    body["control"] = control_report(ctx)
    if brokers is not None:
        body["brokers"] = {"answering": brokers.answering, "known": brokers.known}
    if waiting_for:
        body["waiting_for"] = waiting_for
    if judge is not None:
        body["judge"] = {
            "assigned": judge.assigned,
            "queue_lag": judge.queue_lag,
            "oldest_job_age_s": round(judge.oldest_age(), 1),
        }
    return body, 200 if ready else 503


def _broker_state(brokers: BrokerCount | None) -> str:
    # "unreachable" only through `broker_unreachable` (it lasted): one failed count is a blip
    if brokers is None:
        return "ok"
    return "degraded" if brokers.state == "unreachable" else brokers.state


def control_report(ctx: WorkerContext) -> dict[str, Any]:
    """Whether this worker signs control records and with which key (its id, never the key),
    and what the agents' clients reported doing with them, per agent: an agent refusing them
    (its keys are not the worker's) or taking them unchecked (it holds none) is a mistake the
    operator sees here, not only in the agent's own log."""
    keys = ctx.settings.control_key_set()
    signing = None if keys is None else keys.signing_key
    agents = {
        agent: dict(sorted(tally.items()))
        for agent, tally in sorted(ctx.metrics.agents.control_seen.items())
    }
    return {"signs": signing is not None, "key": signing, "agents": agents}
