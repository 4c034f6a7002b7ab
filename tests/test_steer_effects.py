"""What each steer did, per agent and loop rule: counted from the final evaluations'
`interventions` lists (a single steer today; a steer then a stop, or two steers, once a loop
rule's second crossing may stop), joined to outcomes either way round, each counted once; shown
on /metrics, in `tracejudge status`, the explorer's agent page and `tracejudge replay`'s report.
Evaluations are built by hand and published by the worker's publisher (memory store)."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from tests.memory import MemoryWorker, memory_worker
from tracejudge.judges.agreement.action_effects import (
    ActionCell,
    ActionTally,
    SteerFigures,
    steer_outcomes,
    steered,
)
from tracejudge.judges.agreement.tally import Kept, Truth, View, kept_of
from tracejudge.judges.verdict.conclude import Verdict
from tracejudge.judges.verdict.encoded import made_of
from tracejudge.models.outputs import Evaluation, InterventionMade
from tracejudge.settings import Settings
from tracejudge.streams.agreement.actions import steers_json
from tracejudge.streams.agreement.live import LiveAgreement
from tracejudge.streams.agreement.store import MemoryAgreementStore
from tracejudge.streams.demo.samples import sample_traces
from tracejudge.streams.explorer.agreement import ActionReader, AgreementReader, steers_of
from tracejudge.streams.explorer.server import make_app
from tracejudge.streams.explorer.store import VerdictStore
from tracejudge.streams.kafka.status import Status, render_status
from tracejudge.streams.replay.engine import ReplayResult
from tracejudge.streams.replay.report import summary
from tracejudge.streams.shared.metrics import Metrics


def told(
    crossed: str, action: str, stopped: bool = False, kind: str = "loop", at: int = 3
) -> InterventionMade:
    return InterventionMade.model_validate(
        {
            "intervention_id": f"{kind}-{crossed}-{action}-{at}",
            "kind": kind,
            "crossed": crossed,
            "action": action,
            "at_step": at,
            "steps_after": 0 if stopped else 2,
            "stopped_after": stopped,
        }
    )


def counted(amounts: list[tuple[str, int]]) -> dict[tuple[str, str], SteerFigures]:
    tally = ActionTally()
    tally.add(amounts)
    return tally.steer_figures()


def figures(**given: int) -> SteerFigures:
    return SteerFigures(**{name: given.get(name, 0) for name in SteerFigures.__dataclass_fields__})


VERDICT = {"passed": True, "success": True, "incomplete": False}


def test_a_single_steer_the_run_heeded_left_the_loop_and_ended_on_its_own() -> None:
    amounts = steered(
        "coder", [told("alternating_calls", "steer")], closed_by="final_response", **VERDICT
    )
    assert counted(amounts) == {
        ("coder", "alternating_calls"): figures(sent=1, left_loop=1, ended=1, passed=1, success=1)
    }


def test_a_steer_then_a_stop_of_the_same_rule_counts_the_steer_stopped() -> None:
    made = [told("repeated_call", "steer"), told("repeated_call", "stop", True, at=7)]
    amounts = steered(
        "coder",
        made,
        closed_by="final_response",
        passed=False,
        success=False,
        incomplete=True,
    )
    # the stop is no steer: counted nowhere here, and the run did not end on its own
    assert counted(amounts) == {
        ("coder", "repeated_call"): figures(sent=1, stopped=1, incomplete=1)
    }


def test_two_steers_of_a_rule_count_each_the_second_one_left_the_loop() -> None:
    made = [told("repeated_call", "steer"), told("repeated_call", "steer", at=6)]
    amounts = steered(None, made, closed_by="final_response", **VERDICT)
    (f,) = counted(amounts).values()
    assert f == figures(sent=2, left_loop=1, ended=2, passed=2, success=2)
    assert list(counted(amounts)) == [("(no agent name)", "repeated_call")]


def test_a_stop_for_something_else_or_no_final_response_is_not_ending_on_its_own() -> None:
    made = [
        told("steps", "stop", True, kind="budget", at=1),  # before the steer: no matter
        told("alternating_calls", "steer", at=3),
        told("repeated_failure", "steer", at=4),
        told("no_new_result", "stop", True, at=8),  # another rule stopped the run
    ]
    by_rule = {
        r: f
        for (_, r), f in counted(steered("a", made, closed_by="final_response", **VERDICT)).items()
    }
    assert set(by_rule) == {"alternating_calls", "repeated_failure"}  # steers only
    for f in by_rule.values():  # left their loops; stopped, but not for their rule
        assert (f.sent, f.left_loop, f.ended, f.stopped) == (1, 1, 0, 0)
    went_quiet = steered(
        "a", [told("alternating_calls", "steer")], closed_by="idle_timeout", **VERDICT
    )
    assert counted(went_quiet)[("a", "alternating_calls")].ended == 0
    assert (
        steered(
            "a", [told("steps", "stop", True, kind="budget")], closed_by="final_response", **VERDICT
        )
        == []
    )


def test_the_kept_verdict_names_the_rules_steered_and_an_outcome_counts_each_steer() -> None:
    kept = Kept("a", None, 60, View(80, False, False), ts=1.0, steered=("repeated_call",) * 2)
    assert Kept.decode(kept.encode()) == kept
    plain = Kept("a", None, 60, View(80, False, False), ts=1.0)
    assert len(json.loads(plain.encode())) == 13  # a run never steered keeps what it kept
    assert Kept.decode(plain.encode()).steered == ()
    cell = ActionCell("a", "steer:repeated_call", "outcome_failed").key()
    assert steer_outcomes(kept, ok=False) == [(cell, 2)]
    assert steer_outcomes(plain, ok=True) == []


# -- published by the worker, joined to outcomes ---------------------------------------------


async def sample_evaluation(w: MemoryWorker) -> Evaluation:
    for event in sample_traces("run")[0].events:
        await w.event(event)
    return Evaluation.model_validate(w.channel("evaluations").values()[-1])


async def publish(
    w: MemoryWorker, base: Evaluation, rid: str, made: list[InterventionMade], **update: Any
) -> Evaluation:
    e = base.model_copy(update={"request_id": rid, "interventions": made, **update})
    await w.ctx.publisher.publish(made_of(Verdict(e)))
    return e


async def steered_store() -> tuple[MemoryAgreementStore, str]:
    """Two runs of one agent: one heeded its steer (ok, by two outcome sources), one was
    stopped after its steer (failed; its outcome came before its verdict); one never told."""
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    base = await sample_evaluation(w)
    agent = base.agent_name or "(no agent name)"
    await store.outcome("stopped", Truth(False, "test"), 1_000.0)  # before its verdict
    heeded = await publish(w, base, "heeded", [told("alternating_calls", "steer")])
    stop = [told("alternating_calls", "steer"), told("alternating_calls", "stop", True, at=9)]
    for _ in range(2):  # delivered again: counted once
        await publish(w, base, "stopped", stop, passed=False, success=False, incomplete=True)
    await store.outcome("heeded", Truth(True, "test"), 1_000.0)
    await store.outcome("heeded", Truth(True, "test"), 1_050.0)  # the same again
    await store.outcome("heeded", Truth(True, "review"), 1_000.0)
    assert kept_of(heeded).steered == ("alternating_calls",)
    return store, agent


async def test_steers_published_and_their_outcomes_count_once_in_either_order() -> None:
    store, agent = await steered_store()
    tally = await store.action_tally()
    assert tally.steer_figures() == {
        (agent, "alternating_calls"): figures(
            sent=2,
            left_loop=1,
            ended=1,
            stopped=1,
            passed=1,
            success=1,
            incomplete=1,
            outcome_ok=2,
            outcome_failed=1,
        )
    }
    assert all(not a.startswith("steer:") for _, a in tally.figures())  # apart from actions
    await store.outcome("stopped", Truth(True, "test"), 1_100.0)  # the source changed its mind
    f = (await store.action_tally()).steer_figures()[(agent, "alternating_calls")]
    assert (f.outcome_ok, f.outcome_failed) == (3, 0)


async def test_metrics_status_explorer_and_replay_show_each_rules_steers() -> None:
    store, agent = await steered_store()
    tally = await store.action_tally()

    metrics = Metrics()
    live = LiveAgreement(store)  # type: ignore[arg-type]
    metrics.readings.agreement = live.metrics
    await live.refresh()
    samples = {
        (s.name, s.labels["agent"], s.labels["rule"]): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        if family.name.startswith("tracejudge_steer_")
        for s in family.samples
    }
    assert samples[("tracejudge_steer_sent", agent, "alternating_calls")] == 2
    assert samples[("tracejudge_steer_stopped", agent, "alternating_calls")] == 1
    assert samples[("tracejudge_steer_outcome_ok", agent, "alternating_calls")] == 2

    line = (
        "    alternating_calls: steered 2: left the loop 1, ended on its own 1, stopped 1; "
        "passed 1, success 1, incomplete 1; outcomes ok 2 of 3"
    )
    settings = Settings(redis_url="").masked()
    status = Status(settings, [], [], {}, None, {}, None, steers_json(tally))
    assert line in render_status(status)
    assert json.loads(status.to_json())["steers"][agent]["alternating_calls"]["left_loop"] == 1
    assert "no loop steered yet" in render_status(Status(settings, [], [], {}, None, {}, None, {}))

    result = ReplayResult(Settings(redis_url=""), 0, {}, [], [], [], 0, actions=tally)
    shown = summary(result)
    assert "steers    what each did, per agent and loop rule" in shown and line in shown
    result.actions = ActionTally()
    assert not any(s.startswith("steers") for s in summary(result))

    page = await agent_page(tally, agent)
    row = re.search(r'<tr data-rule="alternating_calls">(.*?)</tr>', page, re.S)
    assert row is not None, page
    cells = dict(re.findall(r'<td class="num" data-figure="(\w+)">(.*?)</td>', row.group(1)))
    assert cells == {
        "sent": "2",
        "left_loop": "1 (50%)",
        "ended": "1 (50%)",
        "stopped": "1 (50%)",
        "passed": "1 (50%)",
        "success": "1 (50%)",
        "incomplete": "1 (50%)",
        "outcome_ok": "2 of 3",
    }
    assert steers_of(tally, "nobody") is None
    assert 'id="steers"' not in await agent_page(ActionTally(), agent)


async def agent_page(tally: ActionTally, agent: str) -> str:
    store = VerdictStore(10)
    store.add_evaluation({"request_id": "r", "agent_name": agent, "overall_score": 90, "ts": 1.0})

    async def read() -> ActionTally:
        return tally

    app = make_app(Settings(redis_url=""), store, AgreementReader(None), ActionReader(read))
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        return await (await client.get(f"/agents/{agent}")).text()
    finally:
        await client.close()


async def test_a_looping_run_through_the_worker_counts_the_steers_its_evaluation_lists() -> None:
    store = MemoryAgreementStore()
    w = memory_worker(agreement=store)
    rid, agent = "loops", "coder"
    base = {"request_id": rid, "agent_name": agent}
    await w.event({**base, "type": "task_started", "goal": "fix the build", "step_index": 0})
    for i in range(1, 9):
        call = {"type": "tool_call", "step_index": i, "tool": "bash", "args_summary": "mvn test"}
        await w.event({**base, **call, "success": True, "result_preview": "same"})
    await w.event({**base, "type": "final_response", "step_index": 9, "output": "gave up"})
    (evaluation,) = w.channel("evaluations").values()
    steers = [m for m in evaluation["interventions"] if m["action"] == "steer"]
    assert steers and {m["crossed"] for m in steers} == {"repeated_call"}
    f = (await store.action_tally()).steer_figures()[(agent, "repeated_call")]
    last = [m for m in evaluation["interventions"] if m["crossed"] == "repeated_call"][-1]
    # only a steer that is the rule's last entry left the loop (no crossing after it)
    assert (f.sent, f.left_loop) == (len(steers), int(last["action"] == "steer"))
    assert f.passed == len(steers) * evaluation["passed"]


def test_a_steer_the_agent_never_read_is_counted_apart_not_as_one_it_heeded() -> None:
    read = told("repeated_call", "steer").model_copy(update={"read": True})
    unread = told("repeated_call", "steer", at=6).model_copy(update={"read": False})
    (f,) = counted(steered("a", [read, unread], closed_by="final_response", **VERDICT)).values()
    assert (f.sent, f.unread, f.left_loop, f.ended) == (1, 1, 0, 1)  # it crossed again
    words = steers_json_words(f)
    assert "steered 1 (and 1 the agent never read)" in words


def steers_json_words(f: SteerFigures) -> str:
    from dataclasses import asdict

    from tracejudge.streams.agreement.actions import steer_words

    return steer_words(asdict(f))


def test_a_checks_steer_is_not_a_loop_rules() -> None:
    made = [told("needs_confirmation", "steer", kind="check")]
    assert steered("a", made, closed_by="final_response", **VERDICT) == []


async def test_the_client_says_which_steers_its_model_was_given() -> None:
    """A steer taken by the integration (handed to the model) is `read`; one that came after
    the agent's last model call is not; the evaluation says which."""
    from tests.test_intervention_reader import dead_address, intervention, recorder
    from tracejudge.client import InterventionReader
    from tracejudge.models.ids import intervention_id

    w = memory_worker()
    reader = InterventionReader(dead_address(), "t.control", {}, warn_interval_s=3600)
    try:
        req, sent = recorder(reader, agent_name="looper")
        rid = req.request_id
        first = intervention_id(rid, "loop", "steer", "repeated_call", 1)
        second = intervention_id(rid, "loop", "steer", "repeated_call", 2)
        reader._take(rid.encode(), intervention(rid, action="steer", intervention_id=first))
        assert [s.intervention_id for s in req.pending_steers()] == [first]  # given to the model
        reader._take(rid.encode(), intervention(rid, action="steer", intervention_id=second))
        req.final("done")  # no model call after the second steer
        control = sent[-1]["control"]
        assert control["read"] == [first] and control["delivered"] == 2
        events = [e for e in sent if e["type"] != "final_response"]
        for e in events:
            await w.event(e)
        w.ctx.store.record_intervention(rid, "loop", "repeated_call", "steer", None)
        w.ctx.store.record_intervention(rid, "loop", "repeated_call", "steer", None)
        await w.event(sent[-1])
        (evaluation,) = w.channel("evaluations").values()
        assert [m["read"] for m in evaluation["interventions"]] == [True, False]
    finally:
        reader.close()
