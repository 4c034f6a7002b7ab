"""GET /health: ready only when the worker really consumes (assigned, recovered, not stalled)."""

from __future__ import annotations

from typing import Any

from tracejudge.streams.worker.context import WorkerContext


def health_report(
    ctx: WorkerContext,
    *,
    recovered: bool,
    rebalancing: bool,
    stalled: bool,
    broker_unreachable: bool = False,
) -> tuple[dict[str, Any], int]:
    """The body and HTTP status of /health."""
    up = ctx.liveness.assigned and recovered and not rebalancing
    ready = up and not stalled and not broker_unreachable
    status = "ok"
    if broker_unreachable:
        status = "broker_unreachable"
    elif stalled:
        status = "stalled"
    elif not ready:
        status = "starting"
    body = {
        "status": status,
        "broker": "unreachable" if broker_unreachable else "ok",
        "assigned": ctx.liveness.assigned,
        "recovered": recovered,
        "rebalancing": rebalancing,
        "redis": ctx.lookup.enabled,
        "redis_errors": ctx.lookup.errors,
        "counters": dict(ctx.counters),
    }
    return body, 200 if ready else 503
