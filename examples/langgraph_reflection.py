"""A LangGraph agent that sometimes skips a planned step, and the reflection worker that
finishes its work: tracejudge judges the skipping run incomplete and asks for a reflection; the
worker runs the same graph on the steps left, as a follow-up linked to the first run.

    TRACEJUDGE_KAFKA_BOOTSTRAP=127.0.0.1:PORT python -m examples.langgraph_reflection [--orders N]
    python -m examples.langgraph_reflection --worker-only      # beside your agent's processes
    python -m examples.langgraph_reflection --bootstrap 127.0.0.1:PORT

Each order's run declares its plan (`get_order`, `refund_payment`, `send_confirmation`) in the
graph's config metadata; every other order's run forgets the confirmation. The model is
LangChain's fake chat model with a script (no API key, no network): with a real model, the
follow-up's prompt would carry the reflection's goal, remaining steps and suggestions, which is
what the script is built from here.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
import time
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent

from examples._common import parser, tracer
from examples.langgraph_agent import ScriptedChatModel
from tracejudge.client import Tracer
from tracejudge.client.events import Recorder
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.reflections import Reflection, ReflectionWorker

AGENT = "langgraph-refund-bot"
STARTED: list[str] = []  # the follow-ups this process ran (list.append is thread-safe)
PLAN = ["get_order", "refund_payment", "send_confirmation"]


@tool
def get_order(order_id: int) -> str:
    """Look an order up."""
    return f"order {order_id}: paid, 20 EUR"


@tool
def refund_payment(order_id: int) -> str:
    """Refund an order's payment."""
    return f"order {order_id}: 20 EUR refunded"


@tool
def send_confirmation(order_id: int) -> str:
    """E-mail the customer that the refund is on its way."""
    return f"order {order_id}: confirmation sent"


TOOLS = [get_order, refund_payment, send_confirmation]


def skips_a_step(order_id: int) -> bool:
    """Every other order's run forgets to confirm (what a model does now and then)."""
    return order_id % 2 == 1


def script(order_id: int, steps: list[str], answer: str) -> list[AIMessage]:
    """The model's turns: one tool call per step, then the answer."""
    usage = {"input_tokens": 150, "output_tokens": 14, "total_tokens": 164}
    calls = [
        AIMessage(
            content="",
            tool_calls=[{"name": step, "args": {"order_id": order_id}, "id": f"c{i}"}],
            usage_metadata=usage,  # type: ignore[arg-type]
        )
        for i, step in enumerate(steps)
    ]
    return [*calls, AIMessage(content=answer, usage_metadata=usage)]  # type: ignore[arg-type]


def run_graph(order_id: int, steps: list[str], answer: str, handler: Any) -> None:
    graph = create_react_agent(
        ScriptedChatModel(responses=script(order_id, steps, answer)), ToolNode(TOOLS)
    )
    graph.invoke(
        {"messages": [("user", f"Refund order {order_id} and confirm it to the customer")]},
        {"callbacks": [handler], "metadata": {"tracejudge_planned_steps": PLAN}},
    )


def handle_order(judged: Tracer, order_id: int) -> str:
    """One order, as the agent handles it; the request id of its run."""
    steps = PLAN[:-1] if skips_a_step(order_id) else PLAN
    handler = TracejudgeCallbackHandler(judged, agent_name=AGENT)
    run_graph(order_id, steps, f"Order {order_id} is refunded.", handler)
    assert handler.last_request_id is not None
    return handler.last_request_id


def finish(reflection: Reflection, run: Recorder) -> str:
    """The reflection worker's callback: the same graph, on what is left of the plan, recorded
    into the follow-up run the worker started."""
    found = re.search(r"order (\d+)", reflection.goal)
    if found is None:
        raise ValueError(f"no order in the goal {reflection.goal!r}")
    order_id = int(found.group(1))
    known = {t.name for t in TOOLS}
    # each piece of work left names its step: here a planned tool the graph skipped
    steps = [left.step for left in reflection.remaining if left.step in known]
    answer = f"Order {order_id}: finished {', '.join(steps) or 'nothing left'}."
    run_graph(order_id, steps, answer, TracejudgeCallbackHandler(None, into=run))
    print(f"follow-up {run.request_id} of {reflection.origin_request_id}: {answer}", flush=True)
    STARTED.append(run.request_id)
    return answer


def reflection_worker(
    options: argparse.Namespace, judged: Tracer | None = None
) -> ReflectionWorker:
    return ReflectionWorker(
        options.bootstrap,
        finish,
        agents=[AGENT],
        topic_prefix=options.topic_prefix,
        tracer=judged,
    )


def main(argv: list[str] | None = None) -> int:
    options = parser("examples.langgraph_reflection", __doc__)
    options.add_argument("--orders", type=int, default=4, help="orders to handle (default 4)")
    options.add_argument(
        "--worker-only", action="store_true", help="run the reflection worker until SIGTERM"
    )
    args = options.parse_args(argv)
    if args.worker_only:
        worker = reflection_worker(args)
        signal.signal(signal.SIGTERM, lambda *_: worker.stop())
        worker.run()
        return 0
    judged = tracer(args)
    worker = reflection_worker(args, judged)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        return _orders(judged, worker, args.orders, args.bootstrap)
    finally:
        worker.stop()
        thread.join(30)
        judged.close()


def _orders(judged: Tracer, worker: ReflectionWorker, orders: int, bootstrap: str) -> int:
    origins = {handle_order(judged, n): n for n in range(1, orders + 1)}
    if not judged.flush(15):
        print(f"the events were not delivered to {bootstrap}: is it up?", file=sys.stderr)
        return 1
    incomplete = 0
    for rid, n in origins.items():
        evaluation = judged.wait_for_evaluation(rid, timeout=60)
        if evaluation is None:
            print(f"no evaluation for order {n} within 60 s: is a worker running?", file=sys.stderr)
            return 1
        incomplete += evaluation.incomplete
        left = ", ".join(r.step for r in evaluation.remaining) or "nothing"
        print(
            f"order {n}: score {evaluation.overall_score}, incomplete {evaluation.incomplete}"
            f" (left: {left})"
        )
    deadline = time.monotonic() + 60
    while worker.stats.handled < incomplete and time.monotonic() < deadline:
        time.sleep(0.1)
    print(f"{worker.stats.handled} follow-up(s) run for {incomplete} incomplete order(s)")
    judged.flush(15)
    for rid in list(STARTED):
        follow_up = judged.wait_for_evaluation(rid, timeout=60)
        if follow_up is None or follow_up.origin is None:
            print(f"no evaluation for the follow-up {rid} within 60 s", file=sys.stderr)
            return 1
        print(
            f"follow-up {rid} (round {follow_up.reflection_round}, of a run that scored "
            f"{follow_up.origin.overall_score}): score {follow_up.overall_score}, incomplete "
            f"{follow_up.incomplete}, final for its chain {follow_up.chain_final}"
        )
    return 0 if worker.stats.handled == incomplete else 1


if __name__ == "__main__":
    sys.exit(main())
