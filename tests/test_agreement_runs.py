"""Runs with outcomes are runs: a request labelled by two outcome sources is one run (two
outcome labels), in `tracejudge status`, a replay's report and their --json forms."""

from __future__ import annotations

import json

from tracejudge.judges.agreement.tally import Kept, Tally, Truth, View
from tracejudge.settings import Settings
from tracejudge.streams.agreement.report import agreement_json
from tracejudge.streams.agreement.store import MemoryAgreementStore
from tracejudge.streams.kafka.status import Status, render_status
from tracejudge.streams.replay.engine import lines_of, replay
from tracejudge.streams.replay.report import summary

NOW = 1_700_000_000.0
SHOP = Kept("shop", "1", 60, View(80, False, False))
JUDGED = Kept("shop", "1", 60, View(70, False, False), View(30, True, True), View(45, True, True))


async def test_a_run_labelled_by_two_sources_is_one_run_and_two_labels() -> None:
    store = MemoryAgreementStore()
    await store.keep("r1", SHOP)
    await store.outcome("r1", Truth(True, "human"), NOW)
    await store.outcome("r1", Truth(False, "test"), NOW)  # the same run, another source
    await store.keep("r2", JUDGED)
    await store.outcome("r2", Truth(True, "test"), NOW)
    tally = await store.tally()
    assert Tally.of_json(json.loads(json.dumps(tally.to_json()))) == tally  # as Redis keeps it
    found = agreement_json(tally)["shop"]
    assert (found["runs"], found["final"]["runs"], found["judged_runs"]) == (2, 3, 1)
    text = render_status(Status(Settings(redis_url="").masked(), [], [], agreement_json(tally)))
    assert "shop: 2 runs with outcomes, 3 outcome labels (2 ok, 1 failed)" in text
    assert "judged runs (1): rules AUC" in text


async def test_a_replay_counts_runs_once_for_every_source_that_labelled_them() -> None:
    rid = "order-7"
    events = [
        {"type": "task_started", "request_id": rid, "ts": NOW, "goal": "Refund order 7"},
        {
            "type": "tool_call",
            "request_id": rid,
            "ts": NOW + 1,
            "step_index": 1,
            "tool": "refund",
            "success": True,
        },
        {"type": "final_response", "request_id": rid, "ts": NOW + 2, "output": "Refunded."},
    ]
    outcomes = [
        {"type": "outcome", "request_id": rid, "ts": NOW + 60, "ok": ok, "source": source}
        for ok, source in ((True, "human"), (False, "test"), (True, "user"))
    ]
    raw = "\n".join(json.dumps(e) for e in (*events, *outcomes)).encode()
    result = await replay(Settings(redis_url=""), lines_of(raw))
    text = "\n".join(summary(result))
    assert "1 run with outcomes, 3 outcome labels (2 ok, 1 failed)" in text, text
