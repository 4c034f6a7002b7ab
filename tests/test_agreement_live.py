"""Verdicts kept at their publish, outcomes joined by the worker's handler, and the live
figures /metrics serves (memory worker and memory store: no Kafka, no Redis)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fake_llm import FakeLLM, tool_call_reply, verdict
from tests.memory import memory_worker
from tests.test_judge_pending import judge_all, run
from tests.test_worker_handlers import final, start, tool
from tracejudge.judges.agreement.tally import (
    Kept,
    Tally,
    Truth,
    View,
    cells,
    kept_of,
    label_ok,
    run_cell,
)
from tracejudge.judges.rules.judge import RuleVerdict
from tracejudge.models import names
from tracejudge.models.outputs import Evaluation
from tracejudge.settings import Settings
from tracejudge.streams.agreement.live import LiveAgreement, bounded
from tracejudge.streams.agreement.outcomes import AgreementOutcomes
from tracejudge.streams.agreement.report import agreement_json
from tracejudge.streams.agreement.store import AgreementUnavailable, MemoryAgreementStore
from tracejudge.streams.kafka.status import Status, render_status
from tracejudge.streams.replay.engine import lines_of, replay
from tracejudge.streams.replay.report import summary
from tracejudge.streams.shared.metrics import Metrics

RID = "req-1"


def outcome(rid: str = RID, **fields: Any) -> dict[str, Any]:
    return {"type": "outcome", "request_id": rid, "ts": 1_000.0, **fields}


async def test_a_final_verdict_is_kept_and_its_outcomes_joined_once() -> None:
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    for event in (start(), tool(1), final()):
        await w.event(event)
    (published,) = w.channel("evaluations").values()
    kept = kept_of(Evaluation.model_validate(published))
    assert store.kept == {RID: kept}
    await w.event(outcome(ok=False, source="human"))
    await w.event(outcome(ok=False, source="human"))  # delivered again
    await w.event(outcome(score=0.9, source="human"))  # the reviewer changed their mind
    await w.event(outcome("never-seen", ok=True))
    counts = w.ctx.metrics.counts
    assert [counts[f"outcomes_{r}"] for r in ("joined", "same", "replaced", "unmatched")] == [
        1,
        1,
        1,
        1,
    ]
    want = Tally()
    want.add(cells(kept, Truth(True, "human")))
    assert (await store.tally()).counts == want.counts
    exposed = w.ctx.metrics.exposition().decode()
    assert 'tracejudge_outcomes_total{result="replaced"} 1.0' in exposed
    assert w.channel("dlq").sent == []


async def test_an_outcome_before_its_verdict_is_early_and_joined_when_it_comes() -> None:
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    await w.event(start())
    await w.event(outcome(ok=True, source="test"))  # the window is open: known
    assert w.ctx.metrics.counts["outcomes_early"] == 1
    for event in (tool(1), final()):
        await w.event(event)
    assert w.ctx.store.is_open(RID) is False
    assert sum((await store.tally()).counts.values()) == 1  # one pair, rules only


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


async def test_a_judged_request_keeps_the_judges_verdict_and_the_rules_own(
    fake: FakeLLM,
) -> None:
    fake.script = lambda body, n: tool_call_reply(verdict(False, True, score=20))
    store = MemoryAgreementStore()
    w = memory_worker(
        agreement=store, llm_judge_enabled=True, llm_base_url=fake.base_url, llm_sample_rate=1.0
    )
    for event in run("r1"):
        await w.event(event)
    assert store.kept == {}  # the pending verdict is not kept
    await judge_all(w)
    _, judged = w.channel("evaluations").values()
    (job,) = w.channel("judge_requests").values()
    rules = RuleVerdict.model_validate(job["rules"])
    kept = store.kept["r1"]
    assert kept == kept_of(Evaluation.model_validate(judged), rules)
    # the rules found it done, the judge did not: kept apart, side by side
    assert kept.judge is not None and kept.judge.alerted and kept.blend is not None
    assert not kept.rules.alerted and kept.rules.score > kept.judge.score


class DownStore(MemoryAgreementStore):
    async def outcome(self, request_id: str, truth: Truth, at: float) -> Any:
        raise AgreementUnavailable("ConnectionError('refused')")


async def test_an_outcome_the_store_cannot_take_is_dead_lettered_not_lost() -> None:
    w = memory_worker(agreement=DownStore())
    await w.event(outcome(ok=True))
    (dead,) = w.channel("dlq").sent
    assert b"refused" in dict(dead.headers)[names.DLQ_ERROR]
    assert w.ctx.metrics.counts["outcomes_failed"] == 1


async def test_the_outcome_time_is_never_ahead_of_the_clock() -> None:
    store = MemoryAgreementStore()
    taker = AgreementOutcomes(store, Metrics(), clock=lambda: 86_400.0 * 3)
    from tracejudge.models.events import Outcome

    event = Outcome(type="outcome", request_id="r", ok=True, ts=86_400.0 * 30)
    await taker.take(event, True)
    assert store.outcomes["r"]["user"] == "1|259200.0"


def tally_of(agents: int, runs_each: int) -> Tally:
    tally = Tally()
    for a in range(agents):
        for i in range(runs_each + a):  # agent a has runs_each + a outcomes
            kept = Kept(f"agent-{a:02d}", "1", 60, View(30 + (i % 2) * 50, i % 2 == 0, i % 2 == 0))
            tally.add([*cells(kept, Truth(i % 2 == 1, "test")), run_cell(kept)])
    return tally


def test_agents_past_the_top_twenty_by_outcomes_count_as_other() -> None:
    top = bounded(tally_of(25, 4))
    agents = top.agents()
    assert len(agents) == 21 and "other" in agents
    assert {f"agent-{a:02d}" for a in range(5)}.isdisjoint(agents)  # the five smallest
    assert top.figures(agent="other").runs == sum(4 + a for a in range(5))


async def test_metrics_show_the_figures_of_the_last_refresh_only() -> None:
    class Source(MemoryAgreementStore):
        reads = 0

        async def tally(self, since: float | None = None) -> Tally:
            self.reads += 1
            return tally_of(2, 6)

    source, metrics = Source(), Metrics()
    live = LiveAgreement(source)  # type: ignore[arg-type]
    metrics.readings.agreement = live.metrics
    assert "tracejudge_agreement_auc{" not in metrics.exposition().decode()
    await live.refresh()
    for _ in range(3):  # scrapes read no tally
        text = metrics.exposition().decode()
    assert source.reads == 1
    samples = {
        (s.name, s.labels["agent"], s.labels["view"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("tracejudge_agreement_")
        for s in family.samples
    }
    assert samples[("tracejudge_agreement_runs", "agent-00", "final")] == 6
    assert samples[("tracejudge_agreement_auc", "agent-01", "rules")] == 1.0
    assert samples[("tracejudge_agreement_ok_alerted", "agent-00", "final")] == 0.0
    assert samples[("tracejudge_agreement_alert_precision", "agent-00", "final")] == 1.0
    assert ("tracejudge_agreement_runs", "agent-00", "judge") not in samples  # not judged


def tau(events: Path) -> tuple[dict[str, Any], bytes]:
    return json.loads((events.parent / "labels.json").read_text()), events.read_bytes()


async def test_a_replay_with_outcomes_reports_what_the_live_worker_would(
    tau_events: Path,
) -> None:
    labels, raw = tau(tau_events)
    truths = [
        json.dumps(outcome(rid, ok=label_ok(label), source="test")) for rid, label in labels.items()
    ]
    result = await replay(Settings(redis_url=""), lines_of(raw + "\n".join(truths).encode()))
    offline = Tally()
    for rid, label in labels.items():
        kept = kept_of(Evaluation.model_validate(result.evaluations[rid]))
        offline.add(cells(kept, Truth(bool(label_ok(label)), "test")))
    assert result.agreement is not None and result.agreement.counts == offline.counts
    text = "\n".join(summary(result))
    want = offline.figures()
    assert f"{want.runs} runs with outcomes ({want.ok_runs} ok, {want.failed_runs} failed)" in text
    assert f"AUC {want.auc:.3f}" in text
    plain = await replay(Settings(redis_url=""), lines_of(raw))
    assert plain.agreement is None and "outcomes" not in "\n".join(summary(plain))


def test_status_prints_the_agreement_per_agent_and_says_when_it_is_off() -> None:
    tally = tally_of(1, 6)
    judged = Kept(
        "judged-agent", "1", 60, View(80, False, False), View(20, True, True), View(50, True, True)
    )
    for ok in (True, False):
        tally.add([*cells(judged, Truth(ok, "human")), run_cell(judged)])
    settings = Settings(redis_url="").masked()
    text = render_status(Status(settings, [], [], agreement_json(tally)))
    assert "agent-00: 6 runs with outcomes (3 ok, 3 failed)  AUC 1.000" in text
    assert "ok alerted 0% (0/3)  failed flagged 100% (3/3)" in text
    # the same run read by each source: the rules let the failed one pass, the judge did not
    assert (
        "judged runs (2): rules AUC 0.500 (failed flagged 0% (0/1)), "
        "judge AUC 0.500 (failed flagged 100% (1/1))"
    ) in text
    off = render_status(Status(settings, [], [], None, "off: no Redis"))
    assert "agreement with outcomes" in off and "off: no Redis" in off
