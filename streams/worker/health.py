"""GET /health: ready only when the worker really consumes (assigned, recovered, not stalled)."""

from __future__ import annotations

from typing import Any

from tracejudge.streams.worker.context import WorkerContext


def health_report(
    ctx: WorkerContext, *, recovered: bool, rebalancing: bool, stalled: bool
) -> tuple[dict[str, Any], int]:
    """The body and HTTP status of /health."""
    ready = ctx.liveness.assigned and recovered and not rebalancing and not stalled
    body = {
        "status": "ok" if ready else "stalled" if stalled else "starting",
        "assigned": ctx.liveness.assigned,
        "recovered": recovered,
        "rebalancing": rebalancing,
        "redis": ctx.lookup.enabled,
        "redis_errors": ctx.lookup.errors,
        "counters": dict(ctx.counters),
    }
    return body, 200 if ready else 503
