"""What every example shares: its options (where the broker is), and printing the verdict that
came back."""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from tracejudge.client import Tracer

# LangGraph 1.x says `create_react_agent` moved to `langchain.agents` (to go in 2.0): the
# examples keep it, as most LangGraph code in use does, and the notice would precede every run
warnings.filterwarnings("ignore", message="create_react_agent has been moved")

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_PREFIX = "tracejudge."


def parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The example's command line: `--help` prints its docstring and options; `--bootstrap` and
    `--topic-prefix` default to TRACEJUDGE_KAFKA_BOOTSTRAP and TRACEJUDGE_TOPIC_PREFIX (the
    lines `tracejudge demo --serve` prints set both)."""
    found = argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    found.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        default=os.environ.get("TRACEJUDGE_KAFKA_BOOTSTRAP") or DEFAULT_BOOTSTRAP,
        help="the Kafka broker to publish to (default: TRACEJUDGE_KAFKA_BOOTSTRAP, else "
        f"{DEFAULT_BOOTSTRAP}; now %(default)s)",
    )
    found.add_argument(
        "--topic-prefix",
        metavar="PREFIX",
        default=os.environ.get("TRACEJUDGE_TOPIC_PREFIX") or DEFAULT_PREFIX,
        help="the topics' prefix, as the worker's (default: TRACEJUDGE_TOPIC_PREFIX, else "
        f"{DEFAULT_PREFIX}; now %(default)s)",
    )
    return found


def tracer(options: argparse.Namespace) -> Tracer:
    """A tracer for the broker and topics the options name."""
    return Tracer(options.bootstrap, topic_prefix=options.topic_prefix)


def report(tracer: Tracer, request_id: str | None, bootstrap: str = "the broker") -> int:
    """Wait for the request's evaluation and print it; the exit code says whether it came."""
    if request_id is None or not tracer.flush(15):
        print(f"the events were not delivered to {bootstrap}: is it up?", file=sys.stderr)
        return 1
    evaluation = tracer.wait_for_evaluation(request_id, timeout=60)
    tracer.close()
    if evaluation is None:
        print(f"no evaluation for {request_id} within 60 s: is a worker running?", file=sys.stderr)
        return 1
    print(
        f"{request_id}: score {evaluation.overall_score}, success {evaluation.success}, "
        f"incomplete {evaluation.incomplete}; {evaluation.summary}"
    )
    for finding in evaluation.findings:
        print(f"  {finding.rule}: {finding.evidence}")
    if evaluation.usage is not None:
        u = evaluation.usage
        print(f"  usage: {u.model_calls} model calls, {u.input_tokens}+{u.output_tokens} tokens")
    for made in evaluation.interventions:
        ended = "stopped" if made.action == "stop" else "no step after it"
        after = ended if made.stopped_after else f"went on {made.steps_after} steps"
        print(
            f"  intervention: {made.kind} {made.crossed} ({made.action}) at step "
            f"{made.at_step}: {after}"
        )
    return 0
