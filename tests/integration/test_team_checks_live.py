"""A team's checks on a live worker, on the real broker:
- the check module and checks file written from docs/checks.md alone, in a folder outside the
  repository, change the worker's verdicts as the page says (tests/test_checks_from_docs.py
  runs the same files through replay and agreement);
- a per-step check stops a real LangGraph agent on the step that breaks it, through the control
  topic and the tracer's reader, as budget and loop interventions do;
- a check that raises on every run and one that sleeps 10 s leave every request evaluated
  within the checks' time limit, each counted in /metrics, the worker going on."""

from __future__ import annotations

import asyncio
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent

from examples.langgraph_agent import ScriptedChatModel
from tests.integration.harness import (
    WorkerProcess,
    consume,
    produce_events,
    refund_request,
    tracer_for,
    values,
    worker_env,
)
from tests.test_checks_from_docs import EXPECTED, RUNS, team_folder
from tracejudge.client import Tracer
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.interventions import InterventionStop

pytestmark = pytest.mark.integration

CONTROL_KEY = "team-checks-" + "0123456789abcdef" * 2
THINK_S = 0.4  # each scripted model call, as a real model takes seconds
AFTER = 2  # tool runs allowed after the breaking one: the intervention is late by that much
LIMIT_S = 1.0  # the checks' time limit on the worker with faulty checks


@contextmanager
def on_path(folder: Path) -> Iterator[None]:
    """The team's folder importable here too: the test reads the worker's settings, which
    import every check at start."""
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        for name in ("team_checks", "team_faults"):
            sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def docs_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """A worker with the page's checks file (and, through it, the page's check module)."""
    folder = team_folder(tmp_path_factory.mktemp("team"))
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        folder,
        "team-checks",
        idle_timeout_s=5,
        control_keys=CONTROL_KEY,
        checks_file=str(folder / "checks.toml"),
    )
    with on_path(folder):
        worker = WorkerProcess({**env, "PYTHONPATH": str(folder)}, folder / "worker.log").start()
        yield worker
        worker.stop()


async def evaluations_of(worker: WorkerProcess, rids: set[str]) -> dict[str, dict[str, Any]]:
    def mine(records: Any) -> dict[str, dict[str, Any]]:
        return {v["request_id"]: v for v in values(records) if v.get("request_id") in rids}

    records = await consume(
        worker.settings.kafka_bootstrap,
        worker.topic("evaluations"),
        until=lambda rs: len(mine(rs)) == len(rids),
        timeout_s=60,
    )
    found = mine(records)
    assert set(found) == rids, worker.tail()
    return found


async def test_the_pages_checks_change_the_live_verdicts(docs_worker: WorkerProcess) -> None:
    events = [e for run, _ in RUNS.values() for e in run]
    await produce_events(docs_worker.settings.kafka_bootstrap, docs_worker.topic("events"), events)
    evaluations = await evaluations_of(docs_worker, set(RUNS))
    for rid, evaluation in evaluations.items():
        checks = [f["rule"] for f in evaluation["findings"] if f["rule"].startswith("check:")]
        assert checks == ([EXPECTED[rid]] if rid in EXPECTED else []), (rid, evaluation)
        assert evaluation["passed"] is (rid not in EXPECTED), (rid, evaluation["reasons"])


# -- a per-step check stops a LangGraph agent ----------------------------------------------------


@pytest.fixture
def tracer(docs_worker: WorkerProcess) -> Iterator[Tracer]:
    tracer = tracer_for(docs_worker, CONTROL_KEY)
    yield tracer
    tracer.close()


def support_agent(script: list[AIMessage], ran: list[str]) -> Any:
    @tool
    def get_order(order_id: int) -> str:
        """Look an order up."""
        ran.append(f"get_order {order_id}")
        return f"order {order_id}: paid, total 54.90"

    @tool
    def refund(order_id: int, amount: float) -> str:
        """Refund part of an order."""
        ran.append(f"refund {order_id}")
        return f"refunded {amount}"

    model = ScriptedChatModel(responses=script, sleep=THINK_S)
    return create_react_agent(model, ToolNode([get_order, refund]))


def calls(*named: tuple[str, dict[str, Any]]) -> list[AIMessage]:
    return [
        AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"c{i}"}])
        for i, (name, args) in enumerate(named)
    ]


async def test_a_per_step_check_stops_a_langgraph_agent_on_the_step_that_breaks_it(
    tracer: Tracer, docs_worker: WorkerProcess
) -> None:
    """The page's `needs_confirmation = ["refund"]`: the agent refunds without asking, and is
    stopped there; the look-ups it had scripted after the refund never run."""
    ran: list[str] = []
    script = [
        *calls(
            ("get_order", {"order_id": 7}),
            ("refund", {"order_id": 7, "amount": 20}),
            *[("get_order", {"order_id": n}) for n in range(8, 14)],
        ),
        AIMessage(content="Refunded 20 EUR, reference RF7K2Q."),
    ]
    handler = TracejudgeCallbackHandler(tracer, agent_name="support-bot")
    config: RunnableConfig = {"callbacks": [handler], "recursion_limit": 40}
    graph = support_agent(script, ran)
    asked: Any = {"messages": [("user", "Please look at order 7, it arrived broken.")]}
    with pytest.raises(InterventionStop) as raised:
        await asyncio.to_thread(graph.invoke, asked, config)
    told = raised.value.intervention
    assert (told.kind, told.crossed, told.action) == ("check", "needs_confirmation", "stop")
    assert ran[:2] == ["get_order 7", "refund 7"] and len(ran) <= 2 + AFTER, ran
    rid = handler.last_request_id
    assert rid is not None and tracer.flush(10)
    events = values(
        await consume(
            docs_worker.settings.kafka_bootstrap,
            docs_worker.topic("events"),
            until=lambda rs: any(
                v.get("request_id") == rid and v.get("type") == "final_response" for v in values(rs)
            ),
            timeout_s=30,
        )
    )
    (refund_call,) = [e for e in events if e.get("request_id") == rid and e.get("tool") == "refund"]
    assert told.step_index == refund_call["step_index"]  # the step that broke it
    evaluation = tracer.wait_for_evaluation(rid, timeout=30)
    assert evaluation is not None, docs_worker.tail()
    made = [(i.kind, i.crossed, i.stopped_after) for i in evaluation.interventions]
    assert made == [("check", "needs_confirmation", True)]
    assert "check:needs_confirmation" in [f.rule for f in evaluation.findings]
    assert not evaluation.passed


# -- checks that raise or hang -------------------------------------------------------------------

FAULTS = """
import time


def raises(run):
    raise RuntimeError("a bug in the team's check")


def sleeps(run):
    time.sleep(10)
    return None
"""


@pytest.fixture(scope="module")
def faulty_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    folder = tmp_path_factory.mktemp("faults")
    (folder / "team_faults.py").write_text(FAULTS)
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        folder,
        "team-faults",
        checks="team_faults:raises,team_faults:sleeps",
        check_timeout_s=LIMIT_S,
    )
    with on_path(folder):
        worker = WorkerProcess({**env, "PYTHONPATH": str(folder)}, folder / "worker.log").start()
        yield worker
        worker.stop()


def metric(worker: WorkerProcess, name: str, labels: dict[str, str]) -> float:
    url = f"http://127.0.0.1:{worker.settings.web_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        found = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if found and ",".join(sorted((found.group(1) or "").split(","))) == want:
            return float(found.group(2))
    return 0.0


async def warmed(worker: WorkerProcess) -> None:
    """One request judged before the timed ones: a worker's first verdict pays its one-time
    costs (the first produce to each output topic, its metadata), which are not the checks'."""
    rid = f"warm-{worker.settings.app_id}"
    await produce_events(
        worker.settings.kafka_bootstrap, worker.topic("events"), refund_request(rid)
    )
    await evaluations_of(worker, {rid})


async def test_checks_that_raise_or_hang_leave_every_request_evaluated_in_time(
    faulty_worker: WorkerProcess,
) -> None:
    await warmed(faulty_worker)
    rids = [f"faulty-{n}" for n in range(6)]
    bootstrap = faulty_worker.settings.kafka_bootstrap
    started = time.monotonic()
    for rid in rids:  # one after another, as runs end
        await produce_events(bootstrap, faulty_worker.topic("events"), refund_request(rid))
    evaluations = await evaluations_of(faulty_worker, set(rids))
    assert time.monotonic() - started < 30  # not a 10 s sleep per request
    finals = {
        r.key.decode(): r.timestamp
        for r in await consume(bootstrap, faulty_worker.topic("events"), until=None, settle_s=0.5)
        if b'"final_response"' in r.value
    }
    records = await consume(bootstrap, faulty_worker.topic("evaluations"), until=None)
    made_at = {r.key.decode(): r.timestamp for r in records if r.key}
    for rid, evaluation in evaluations.items():
        late_s = (made_at[rid] - finals[rid]) / 1000
        # the limit, and what a verdict takes besides (closing, producing: milliseconds)
        assert late_s < LIMIT_S + 1.0, (rid, late_s, faulty_worker.tail())
        assert any("team_faults:sleeps timed out" in r for r in evaluation["reasons"])
        assert evaluation["passed"]  # the verdict is everything else's
    raised = metric(
        faulty_worker, "tracejudge_check_errors_total", {"check": "team_faults:raises",
                                                         "kind": "raised"},
    )  # fmt: skip
    timed_out = metric(
        faulty_worker, "tracejudge_check_errors_total", {"check": "team_faults:sleeps",
                                                         "kind": "timeout"},
    )  # fmt: skip
    assert raised >= 1 and timed_out == len(rids) + 1, faulty_worker.tail()  # and the warm-up
    assert faulty_worker.health()[0] == 200


# -- checks that would freeze a worker that ran them on its own threads -----------------------

FREEZES = '''
import re
import time

from tracejudge.judges.checks import Failure


def spins(run):
    """CPU-bound for a minute: holds the GIL of whatever process runs it."""
    until = time.monotonic() + 60
    n = 0
    while time.monotonic() < until:
        n += 1
    return None


def backtracks(run):
    """A pattern Python's engine takes exponential time on, against the run's long answer."""
    re.search(r"(a+)+$", (run.final_answer or "")[-40:])  # 39 a and "!": 2**39 tries
    return None


def malformed(run):
    return Failure("points at half a step", step=2.5)


def sneaks(run):
    """A Failure made malformed after its checks: the worker's own validation must catch it."""
    found = Failure("a step that is no index")
    object.__setattr__(found, "step", [3])
    return found


def floods(run):
    return [Failure("x" * 1_000_000, severity="note") for _ in range(1000)]
'''


@pytest.fixture(scope="module")
def freezing_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    folder = tmp_path_factory.mktemp("freezes")
    (folder / "team_freezes.py").write_text(FREEZES)
    (folder / "checks.toml").write_text("[default]\nfinal_must_not_match = ['(a+)+$']\n")
    names = ",".join(f"team_freezes:{n}" for n in ("spins", "backtracks", "malformed", "sneaks",
                                                   "floods"))  # fmt: skip
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        folder,
        "team-freezes",
        checks=names,
        checks_file=str(folder / "checks.toml"),
        check_timeout_s=LIMIT_S,
    )
    with on_path(folder):
        worker = WorkerProcess({**env, "PYTHONPATH": str(folder)}, folder / "worker.log").start()
        yield worker
        worker.stop()


async def test_checks_that_spin_or_backtrack_never_freeze_the_worker(
    freezing_worker: WorkerProcess,
) -> None:
    """A check spinning the CPU for 60 s, a regular expression backtracking on a long answer
    (in a team's code, and in the checks file, where RE2 runs it in linear time) and checks
    returning malformed or enormous findings: every request's verdict within the limit plus
    1 s, the worker in its group throughout (no partition revoked), each check counted."""
    worker = freezing_worker
    bootstrap = worker.settings.kafka_bootstrap
    await warmed(worker)
    revoked = metric(worker, "tracejudge_partitions_revoked_total", {})
    rids = [f"freezes-{n}" for n in range(8)]
    for rid in rids:  # one after another, as runs end; each answers with a long run of a's
        events = refund_request(rid)
        events[-1] = {**events[-1], "output": "a" * 3000 + "!"}
        await produce_events(bootstrap, worker.topic("events"), events)
        await asyncio.sleep(0.5)
    evaluations = await evaluations_of(worker, set(rids))
    finals = {
        r.key.decode(): r.timestamp
        for r in await consume(bootstrap, worker.topic("events"), until=None, settle_s=0.5)
        if b'"final_response"' in r.value
    }
    records = await consume(bootstrap, worker.topic("evaluations"), until=None)
    made_at = {r.key.decode(): r.timestamp for r in records if r.key}
    for rid in rids:
        late_s = (made_at[rid] - finals[rid]) / 1000
        assert late_s < LIMIT_S + 1.0, (rid, late_s, worker.tail())
    for evaluation in evaluations.values():
        assert len(evaluation["findings"]) <= 40  # the flood clipped: 20 per check at most
        assert all(len(f["evidence"]) <= 600 for f in evaluation["findings"])
    kinds = {"spins": "timeout", "backtracks": "timeout", "malformed": "raised",
             "sneaks": "bad_answer"}  # fmt: skip
    errors = "tracejudge_check_errors_total"
    counted = {
        name: metric(worker, errors, {"check": f"team_freezes:{name}", "kind": kind})
        for name, kind in kinds.items()
    }
    assert all(v >= 1 for v in counted.values()), (counted, worker.tail())
    assert metric(worker, "tracejudge_partitions_revoked_total", {}) == revoked, worker.tail()
    assert worker.health()[0] == 200
    assert worker.process is not None and worker.process.poll() is None  # never exited
