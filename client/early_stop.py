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

import json
import logging
from collections import OrderedDict
from typing import Any

from tracejudge.client.interventions import CLOCK_SKEW_S, another_run
from tracejudge.models.names import REDIS_CONTROL_KEY
from tracejudge.models.outputs import EarlyStopDecision
from tracejudge.models.signing import ControlKeys, control_key_set

log = logging.getLogger("tracejudge.client")


class EarlyStopClient:
    """Synchronous, for plain loops; never raises on a Redis outage (the loop just goes on).
    `control_keys`: the worker's TRACEJUDGE_CONTROL_KEYS (read from that environment variable
    when not given); with keys, a decision none of them signed, or another request's, is
    answered as no decision and counted in `rejected`."""

    def __init__(
        self,
        redis_url: str,
        timeout_s: float = 0.5,
        control_keys: str | None = None,
        topic_prefix: str = "tracejudge.",
        latest: LatestDecisions | None = None,
    ) -> None:
        """`topic_prefix`: the deployment's (TRACEJUDGE_TOPIC_PREFIX): Ed25519 signatures are
        bound to it."""
        self.keys = _keys(control_keys, topic_prefix)
        self.rejected = 0
        self._latest = LatestDecisions() if latest is None else latest
        redis = redis_module()
        self._redis = redis.Redis.from_url(
            redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    def check(
        self, request_id: str, since: float | None = None, run_nonce: str | None = None
    ) -> EarlyStopDecision | None:
        """`since`: when this run of the request began (epoch seconds): a decision made before
        it (allowing for clocks apart) belongs to an earlier run of the same id and is
        refused, as interventions are. `run_nonce`: the run's (`req.run_nonce`): a decision
        signed for another run of the id is refused. A decision older than one this client
        answered for the request before is not taken in its place."""
        try:
            raw = self._redis.get(REDIS_CONTROL_KEY.format(request_id=request_id))
        except (redis_module().RedisError, OSError):
            return self._latest.get(request_id, since, run_nonce)
        decision, trusted = _read(raw, request_id, self.keys, since, run_nonce)
        self.rejected += not trusted
        return self._latest.keep(request_id, decision, since, run_nonce)


class AsyncEarlyStopClient:
    """`EarlyStopClient` for asyncio loops."""

    def __init__(
        self,
        redis_url: str,
        timeout_s: float = 0.5,
        control_keys: str | None = None,
        topic_prefix: str = "tracejudge.",
        latest: LatestDecisions | None = None,
    ) -> None:
        """`topic_prefix`: the deployment's (TRACEJUDGE_TOPIC_PREFIX): Ed25519 signatures are
        bound to it."""
        self.keys = _keys(control_keys, topic_prefix)
        self.rejected = 0
        self._latest = LatestDecisions() if latest is None else latest
        self._redis = redis_module().asyncio.from_url(
            redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    async def check(
        self, request_id: str, since: float | None = None, run_nonce: str | None = None
    ) -> EarlyStopDecision | None:
        try:
            raw = await self._redis.get(REDIS_CONTROL_KEY.format(request_id=request_id))
        except (redis_module().RedisError, OSError):
            return self._latest.get(request_id, since, run_nonce)
        decision, trusted = _read(raw, request_id, self.keys, since, run_nonce)
        self.rejected += not trusted
        return self._latest.keep(request_id, decision, since, run_nonce)

    async def aclose(self) -> None:
        await self._redis.aclose()


def _keys(control_keys: str | None, topic_prefix: str) -> ControlKeys | None:
    keys = control_key_set(control_keys)
    return None if keys is None else keys.for_deployment(topic_prefix)


MAX_REMEMBERED = 10_000  # requests whose latest decision a client remembers


class LatestDecisions:
    """The newest trusted decision answered per request, so a replayed older one (a hint put
    back over a stop) is never answered in its place. Bounded: the oldest request is
    forgotten first."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, EarlyStopDecision] = OrderedDict()

    def get(
        self, request_id: str, since: float | None = None, run_nonce: str | None = None
    ) -> EarlyStopDecision | None:
        """The newest decision answered for this run of the request (one kept from an earlier
        run of the same id is forgotten)."""
        kept = self._kept.get(request_id)
        if kept is not None and _stale(kept, since, run_nonce):
            del self._kept[request_id]
            return None
        return kept

    def keep(
        self,
        request_id: str,
        decision: EarlyStopDecision | None,
        since: float | None = None,
        run_nonce: str | None = None,
    ) -> EarlyStopDecision | None:
        kept = self.get(request_id, since, run_nonce)
        if decision is None or (
            kept is not None
            and (kept.iteration, kept.ts)
            > (
                decision.iteration,
                decision.ts,
            )
        ):
            return kept
        self._kept[request_id] = decision
        self._kept.move_to_end(request_id)
        if len(self._kept) > MAX_REMEMBERED:
            self._kept.popitem(last=False)
        return decision


def _read(
    raw: bytes | None,
    request_id: str,
    keys: ControlKeys | None,
    since: float | None = None,
    run_nonce: str | None = None,
) -> tuple[EarlyStopDecision | None, bool]:
    """The decision stored for `request_id`, and whether it could be trusted (False: dropped)."""
    if not raw:
        return None, True
    try:
        record = json.loads(raw)
        decision = EarlyStopDecision.model_validate(record)
    except Exception:  # never into the agent's loop: what cannot be read is not acted on
        log.warning("tracejudge client: an unreadable early-stop decision; ignored")
        return None, False
    stale = _stale(decision, since, run_nonce)
    if decision.request_id != request_id or stale or (keys is not None and not keys.verify(record)):
        log.warning(
            "tracejudge client: an early-stop decision for %r not signed by a control key, "
            "another request's, or older than its run; ignored",
            request_id,
        )
        return None, False
    return decision, True


def _stale(decision: EarlyStopDecision, since: float | None, run_nonce: str | None) -> bool:
    """Made for another run of the request: another nonce, or before this run began (less
    the clocks' allowance)."""
    early = since is not None and decision.ts < since - CLOCK_SKEW_S
    return early or another_run(decision.run_nonce, run_nonce)


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
