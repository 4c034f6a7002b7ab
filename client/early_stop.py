"""For iterative loops: one GET between rounds says whether tracejudge thinks they may stop.

from tracejudge.client.early_stop import EarlyStopClient

client = EarlyStopClient("redis://127.0.0.1:6379/0")
for round_ in range(1, max_rounds + 1):
    run_round(round_)                      # publishes its `iteration` event
    decision = client.check(request_id)
    if decision and decision.action == "stop":
        break
    if decision and decision.action == "finalize":
        run_final_round()                  # write the conclusion, then stop
        break
"""

from __future__ import annotations

from typing import Any

from tracejudge.models.names import REDIS_CONTROL_KEY
from tracejudge.models.outputs import EarlyStopDecision


class EarlyStopClient:
    """Synchronous, for plain loops; never raises on a Redis outage (the loop just goes on)."""

    def __init__(self, redis_url: str, timeout_s: float = 0.5) -> None:
        redis = redis_module()
        self._redis = redis.Redis.from_url(
            redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    def check(self, request_id: str) -> EarlyStopDecision | None:
        try:
            raw = self._redis.get(REDIS_CONTROL_KEY.format(request_id=request_id))
        except (redis_module().RedisError, OSError):
            return None
        return EarlyStopDecision.model_validate_json(raw) if raw else None  # type: ignore[arg-type]


class AsyncEarlyStopClient:
    def __init__(self, redis_url: str, timeout_s: float = 0.5) -> None:
        self._redis = redis_module().asyncio.from_url(
            redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    async def check(self, request_id: str) -> EarlyStopDecision | None:
        try:
            raw = await self._redis.get(REDIS_CONTROL_KEY.format(request_id=request_id))
        except (redis_module().RedisError, OSError):
            return None
        return EarlyStopDecision.model_validate_json(raw) if raw else None

    async def aclose(self) -> None:
        await self._redis.aclose()


def redis_module() -> Any:
    """redis-py, an extra of the client (`pip install 'tracejudge[redis]'`): imported when a
    Redis URL is used, with a clear line when it is not installed."""
    try:
        import redis
        import redis.asyncio
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "reading verdicts or early-stop decisions from Redis needs redis-py: "
            "pip install 'tracejudge[redis]'",
            name="redis",
        ) from exc
    return redis
