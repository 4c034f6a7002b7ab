"""Outcomes joined to verdicts, per request, and the agreement tally they make.

`store`: where a final verdict's `Kept` and the outcomes of its request meet (Redis, shared by
every process; a memory twin for replay and tests). `outcomes`: the worker's handler of
outcome events. `live`: the figures /metrics and `tracejudge status` read.
"""

from tracejudge.streams.agreement.store import (
    AgreementStore,
    MemoryAgreementStore,
    RedisAgreementStore,
)

__all__ = ["AgreementStore", "MemoryAgreementStore", "RedisAgreementStore"]
