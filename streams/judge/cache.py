"""The judge's verdict cache in Redis: a replayed request costs no model call."""

from __future__ import annotations

import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tracejudge.judges.llm.answer import JudgeAnswer
from tracejudge.judges.masking.redact import masked_json

log = logging.getLogger(__name__)


class JudgeCache:
    """Verdicts by a hash of judge input, prompt version and model: a replay costs no call."""

    def __init__(self, client: aioredis.Redis | None, ttl_s: int) -> None:
        self._client = client
        self.ttl_s = ttl_s
        self.errors = 0

    async def get(self, key: str) -> JudgeAnswer | None:
        if self._client is None:
            return None
        try:
            raw = await self._client.get(key)
        except (RedisError, OSError):
            self.errors += 1
            return None
        return JudgeAnswer.model_validate_json(raw) if raw else None

    async def put(self, key: str, answer: JudgeAnswer) -> None:
        if self._client is None:
            return
        try:
            # the parsed answer, masked: a model that quotes the trace must not put its
            # secrets into Redis for the cache's lifetime
            await self._client.set(key, masked_json(answer), ex=self.ttl_s)
        except (RedisError, OSError):
            self.errors += 1
