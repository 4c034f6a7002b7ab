"""What every agreement store must do (streams/agreement/store.py), whatever keeps it: run on
the memory twin by tests/test_agreement_store.py, on the real Redis by
tests/integration/test_agreement_store.py."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable

from tracejudge.judges.agreement.tally import Kept, Tally, Truth, View, cells
from tracejudge.streams.agreement.store import AgreementStore

NOW = time.time()
DAY = 86400.0
PLAIN = Kept("shop", "1", 60, View(80, False, False))
JUDGED = Kept("shop", "2", 60, View(70, False, False), View(30, True, True), View(45, True, True))


def expected(*pairs: tuple[Kept, Truth]) -> Tally:
    tally = Tally()
    for kept, truth in pairs:
        tally.add(cells(kept, truth))
    return tally


async def verdict_then_outcomes(store: AgreementStore) -> None:
    await store.keep("r1", JUDGED)
    failed, ok = Truth(False, "human"), Truth(True, "human")
    assert await store.outcome("r1", failed, NOW) == "joined"
    assert (await store.tally()).counts == expected((JUDGED, failed)).counts
    # the same outcome again (a redelivery, or told twice later): counted once
    assert await store.outcome("r1", failed, NOW + 60) == "same"
    await store.keep("r1", JUDGED)  # the verdict published again
    assert (await store.tally()).counts == expected((JUDGED, failed)).counts
    # another outcome of that source replaces the first, another source adds its own
    assert await store.outcome("r1", ok, NOW + 120) == "replaced"
    assert await store.outcome("r1", Truth(False, "test"), NOW) == "joined"
    want = expected((JUDGED, ok), (JUDGED, Truth(False, "test")))
    tally = await store.tally()
    assert tally.counts == want.counts
    # one run, labelled by two sources: two labels in the figures, one run
    assert (tally.runs(), tally.runs(judged=True), tally.figures().runs) == (1, 1, 2)


async def outcome_before_verdict(store: AgreementStore) -> None:
    truth = Truth(True, "test")
    assert await store.outcome("r2", truth, NOW) == "early"
    assert await store.outcome("r2", truth, NOW) == "same"
    assert not (await store.tally()).counts  # nothing to count without a verdict
    await store.keep("r2", PLAIN)
    await store.keep("r2", PLAIN)
    assert await store.outcome("r2", truth, NOW) == "same"
    assert (await store.tally()).counts == expected((PLAIN, truth)).counts
    # replaced before its verdict: only the last one counts when it comes
    assert await store.outcome("r3", Truth(True, "user"), NOW) == "early"
    assert await store.outcome("r3", Truth(False, "user"), NOW) == "replaced"
    await store.keep("r3", PLAIN)
    want = expected((PLAIN, truth), (PLAIN, Truth(False, "user")))
    tally = await store.tally()
    assert tally.counts == want.counts
    assert (tally.runs(), tally.runs(agent="shop", version="1"), tally.runs(judged=True)) == (
        2,
        2,
        0,
    )


async def races_and_redeliveries(store: AgreementStore, runs: int = 150) -> None:
    """Verdicts and outcomes of many requests, in every order, each delivered one to three
    times, all at once: each pair counted once."""
    rng = random.Random(39)
    truths = {f"q{i}": Truth(rng.random() < 0.5, "test") for i in range(runs)}
    kepts = {rid: JUDGED if rng.random() < 0.5 else PLAIN for rid in truths}
    calls: list[Awaitable[object]] = []
    for rid, truth in truths.items():
        calls += [store.keep(rid, kepts[rid]) for _ in range(rng.randint(1, 3))]
        calls += [store.outcome(rid, truth, NOW) for _ in range(rng.randint(1, 3))]
    rng.shuffle(calls)
    await asyncio.gather(*calls)
    want = expected(*((kepts[rid], truth) for rid, truth in truths.items()))
    tally = await store.tally()
    assert tally.counts == want.counts
    assert tally.runs() == runs
    assert tally.runs(judged=True) == sum(k.judged for k in kepts.values())


async def day_buckets(store: AgreementStore) -> None:
    """An outcome counts in its day's bucket; replaced, it leaves that bucket for its own."""
    early, late = Truth(True, "human"), Truth(False, "human")
    await store.keep("d1", PLAIN)
    assert await store.outcome("d1", early, NOW - 3 * DAY) == "joined"
    assert (await store.tally(since=NOW - 4 * DAY)).counts == expected((PLAIN, early)).counts
    assert not (await store.tally(since=NOW - DAY)).counts
    assert (await store.tally(since=NOW - 4 * DAY)).runs() == 1
    assert (await store.tally(since=NOW - DAY)).runs() == 0
    assert await store.outcome("d1", late, NOW) == "replaced"
    assert (await store.tally(since=NOW - 4 * DAY)).counts == expected((PLAIN, late)).counts
    assert (await store.tally(since=NOW - DAY)).counts == expected((PLAIN, late)).counts
    # the run goes with the pair counted last: counted once, in its day
    assert (await store.tally(since=NOW - 4 * DAY)).runs() == 1
    assert (await store.tally(since=NOW - DAY)).runs() == 1
