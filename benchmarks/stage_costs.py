"""What each stage of a request costs, measured one by one, in one process (no Kafka, no Redis).

    python -m benchmarks.stage_costs [--repeat N]

Every stage runs on the worker's event loop, so its cost is what holds up the next event. Each
is timed on two shapes: the side-by-side benchmark's request (10 events, ~260 bytes each) and a
window at the step limit with long texts full of things to mask (50 steps of 2,000 characters,
an 8,000-character answer). Early-stop checks are timed after 2, 10 and 40 rounds: a check that
re-read the window would grow with them. Microseconds per call: the best of as many calls as
fit 0.2 s; a step's handling and a close, the median over `--repeat` × 20 and × 5 windows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.adversarial import timed as best_of
from benchmarks.side_by_side import backlog
from tests.memory import MemoryWorker, memory_worker
from tracejudge.judges.answers.generic import assess_answer
from tracejudge.judges.inflight.early_stop import check_early_stop
from tracejudge.judges.llm.prompt import build_input
from tracejudge.judges.masking.redact import mask
from tracejudge.judges.rules.judge import RuleJudge
from tracejudge.judges.verdict.conclude import DISABLED, Policy, WindowFacts, conclude
from tracejudge.judges.verdict.encoded import made_of
from tracejudge.judges.windows.records import window_of
from tracejudge.models.events import parse_event

STEP_LIMIT = 50
SECRET_TEXT = (
    "Customer jane.doe@example.com (card 4111 1111 1111 1111) asked again; the call used "
    "api_key=sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c and token "
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789. "
)


def typical(rid: str) -> list[dict[str, Any]]:
    return [{**json.loads(value), "request_id": rid} for _, value in backlog(1, rid)]


def at_step_limit(rid: str) -> list[dict[str, Any]]:
    long_text = (SECRET_TEXT * 12)[:2000]
    events: list[dict[str, Any]] = [{"type": "task_started", "request_id": rid, "goal": long_text}]
    for step in range(1, STEP_LIMIT + 1):
        if step % 2:
            events.append(
                {
                    "type": "reasoning_step",
                    "request_id": rid,
                    "step_index": step,
                    "phase": "plan",
                    "intent_summary": long_text,
                }
            )
        else:
            events.append(
                {
                    "type": "tool_call",
                    "request_id": rid,
                    "step_index": step,
                    "tool": "lookup",
                    "success": True,
                    "args_summary": long_text,
                    "result_preview": long_text,
                }
            )
    answer = ("Refunded the order and wrote to the customer. " + SECRET_TEXT) * 40
    events.append(
        {
            "type": "final_response",
            "request_id": rid,
            "step_index": STEP_LIMIT + 1,
            "output": answer[:8000],
        }
    )
    return events


def iterations(rid: str, rounds: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"type": "task_started", "request_id": rid, "goal": "tune"}]
    for n in range(1, rounds + 1):
        events.append(
            {
                "type": "iteration",
                "request_id": rid,
                "step_index": n,
                "iteration": n,
                "max_iterations": 100,
                "response": f"<Hypothesis>candidate {n}</Hypothesis> " + "tried it. " * 80,
                "exec_success": n % 2 == 0,  # never two successes in a row: no decision
            }
        )
    return events


def timed(fn: Callable[[], Any]) -> float:
    """Microseconds per call, best of as many as fit 0.2 s (the adversarial benchmark's way)."""
    return best_of(lambda _: fn(), "") * 1e6


def feed(worker: MemoryWorker, events: list[dict[str, Any]]) -> None:
    loop = asyncio.get_event_loop()
    for event in events:
        loop.run_until_complete(worker.event(event))


def agent_rows(repeat: int) -> list[tuple[str, str, float]]:
    """The window agent's stages, as its handlers run them."""
    rows = []
    worker = memory_worker(max_trace_steps=STEP_LIMIT)
    store = worker.ctx.store
    for shape, make in (("typical", typical), ("at step limit", at_step_limit)):
        rows.append(("agent", f"parse + validate an event ({shape})", parse_cost(make)))
        # a step's whole handling (parse, duplicate check, store), first and last of a window
        counter = iter(range(10**9))
        n = len(make("x")) - 2  # steps only: not task_started, not the terminal event

        first, last = asyncio.get_event_loop().run_until_complete(
            step_costs(worker, [make(f"{shape}-step-{next(counter)}") for _ in range(repeat * 20)])
        )
        rows.append(("agent", f"handle step 1 of {n} ({shape})", first))
        rows.append(("agent", f"handle step {n} of {n} ({shape})", last))
        # the close: read the window's records out and mark it closed (the verdict is made
        # elsewhere)
        closes = []
        for _ in range(repeat * 5):
            rid = f"{shape}-close-{next(counter)}"
            feed(worker, make(rid)[:-1])
            t0 = time.perf_counter()
            store.stored(rid)
            store.close(rid, "final_response", 2_000.0, -1)
            closes.append((time.perf_counter() - t0) * 1e6)
        rows.append(("agent", f"close the window ({shape})", statistics.median(closes)))
    policy = worker.ctx.settings.early_stop_policy()
    for rounds in (2, 10, 40):
        rid = f"iter-{rounds}"
        feed(worker, iterations(rid, rounds))

        def check(rid: str = rid) -> Any:
            return check_early_stop(store.rounds(rid), policy, store.early_actions(rid))

        rows.append(("agent", f"early-stop check after {rounds} rounds", timed(check)))
    dead = worker.channel("dlq").values()
    assert not dead, f"the benchmark's events were dead-lettered: {dead[:1]}"
    return rows


def verdict_rows() -> list[tuple[str, str, float]]:
    """A verdict's stages, for one closed window."""
    rows = []
    worker = memory_worker(max_trace_steps=STEP_LIMIT)
    rules = RuleJudge(tool_call_budget=12)
    for shape, make in (("typical", typical), ("at step limit", at_step_limit)):
        for name, cost in verdict_costs(worker, rules, make(f"verdict-{shape}")).items():
            rows.append(("verdict", f"{name} ({shape})", cost))
    return rows


def verdict_costs(
    worker: MemoryWorker, rules: RuleJudge, events: list[dict[str, Any]]
) -> dict[str, float]:
    store, rid = worker.ctx.store, events[0]["request_id"]
    feed(worker, events[:-1])
    # the answer too, without the close its event would start (the verdict is timed here)
    store.add(parse_event(json.dumps(events[-1])), 0, 2e3)
    meta, records = store.stored(rid)

    def window() -> Any:
        return window_of(
            rid,
            records,
            closed_by="final_response",
            step_count=meta.step_count,
            steps_dropped=0,
            early_stops=[],
        )

    win = window()
    verdict = rules.judge(win)
    facts = WindowFacts.of(win)
    task, answer = events[0]["goal"], events[-1]["output"]
    return {
        "decode the stored records": timed(window),
        "rules (with answer classification)": timed(lambda: rules.judge(win)),
        "  of which answer classification": timed(lambda: assess_answer(task, answer)),
        "conclude + mask + encode the outputs": timed(
            lambda: made_of(conclude(facts, verdict, DISABLED, Policy(), "v", 2e3))
        ),
        "judge input (mask, trim, render)": timed(lambda: build_input(win, 24_000)),
        "mask the answer alone": timed(lambda: mask(answer)),
    }


async def step_costs(
    worker: MemoryWorker, windows: list[list[dict[str, Any]]]
) -> tuple[float, float]:
    """Median microseconds to handle the first step of a window and its last."""
    first, last = [], []
    for events in windows:
        steps = events[1:-1]
        await worker.event(events[0])
        for i, event in enumerate(steps):
            t0 = time.perf_counter()
            await worker.event(event)
            spent = (time.perf_counter() - t0) * 1e6
            if i == 0:
                first.append(spent)
            elif i == len(steps) - 1:
                last.append(spent)
    return statistics.median(first), statistics.median(last)


def parse_cost(make: Callable[[str], list[dict[str, Any]]]) -> float:
    raw = [json.dumps(e).encode() for e in make("parse")]
    return timed(lambda: [parse_event(r) for r in raw]) / len(raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.set_event_loop(asyncio.new_event_loop())
    rows = agent_rows(args.repeat) + verdict_rows()
    print(f"{'where':8} {'stage':58} {'us/call':>9}")
    for where, name, cost in rows:
        print(f"{where:8} {name:58} {cost:9.1f}")


if __name__ == "__main__":
    main()
