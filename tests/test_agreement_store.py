"""The agreement store's semantics on its memory twin (the Redis store runs the same cases in
tests/integration/test_agreement_store.py)."""

from __future__ import annotations

import pytest

from tests import agreement_cases as cases
from tracejudge.streams.agreement.store import MemoryAgreementStore, keys_of


@pytest.mark.parametrize(
    "case",
    [
        cases.verdict_then_outcomes,
        cases.outcome_before_verdict,
        cases.races_and_redeliveries,
        cases.day_buckets,
    ],
)
async def test_memory_store(case) -> None:  # type: ignore[no-untyped-def]
    await case(MemoryAgreementStore())


def test_deployments_sharing_a_redis_keep_apart_keys() -> None:
    assert keys_of("tracejudge.") == "tracejudge:agreement:"
    assert keys_of("staging.") == "tracejudge:agreement:staging."
