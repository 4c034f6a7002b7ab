"""A LangGraph agent caught in a loop, stopped by tracejudge while it runs. Its scripted model
asks for the same order again and again; the worker finds the loop on the third identical
call and publishes an intervention; the handler raises `InterventionStop` before the next
model call, and the evaluation says the run stopped for it. No API key, no network.

A loop's first crossing stops a run only for agents whose team chose it: by default it steers
(a message to the agent), and a stop comes only when the loop forms again after the steer and
the run is longer than its agent's runs usually are (docs/interventions.md). This example's
agent is `langgraph-looping-bot`; run the worker with a budgets file that says, for it:

    [agents."langgraph-looping-bot"]
    loop_action = "stop"

    TRACEJUDGE_KAFKA_BOOTSTRAP=127.0.0.1:PORT python -m examples.langgraph_loop_stop
    python -m examples.langgraph_loop_stop --bootstrap 127.0.0.1:PORT
"""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, create_react_agent

from examples._common import parser, report, tracer
from examples.langgraph_agent import ScriptedChatModel
from tracejudge.client.integrations.langchain import TracejudgeCallbackHandler
from tracejudge.client.interventions import InterventionStop

LOOKUPS = 20  # the script would go on this long; the loop is found on the third


@tool
def get_order(order_id: int) -> str:
    """Look an order up."""
    return f"order {order_id}: status unknown"


def lookup(i: int) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": "get_order", "args": {"order_id": 7}, "id": f"c{i}"}],
        usage_metadata={"input_tokens": 150, "output_tokens": 15, "total_tokens": 165},
    )


def main(argv: list[str] | None = None) -> int:
    options = parser("examples.langgraph_loop_stop", __doc__).parse_args(argv)
    judged = tracer(options)
    handler = TracejudgeCallbackHandler(judged, agent_name="langgraph-looping-bot")
    script = [lookup(i) for i in range(LOOKUPS)] + [AIMessage(content="I could not tell.")]
    # a model takes a while to answer: time for the intervention to arrive between steps
    model = ScriptedChatModel(responses=script, sleep=0.3)
    graph = create_react_agent(model, ToolNode([get_order]))
    asked: Any = {"messages": [("user", "What is the status of order 7?")]}
    try:
        graph.invoke(asked, {"callbacks": [handler]})
        # steers may have come (the default for a loop): the evaluation below lists them
        print(
            "the run went to its end: no stop came (a steer is listed with the evaluation "
            'below; a stop needs loop_action = "stop" for this agent, as above)',
            file=sys.stderr,
        )
    except InterventionStop as stop:
        told = stop.intervention
        print(f"stopped by tracejudge: {told.kind} {told.crossed} at step {told.step_index}")
        print(f"  {told.message}")
    code = report(judged, handler.last_request_id, options.bootstrap)
    return code


if __name__ == "__main__":
    sys.exit(main())
