"""What every example shares: where the broker is, and printing the verdict that came back."""

from __future__ import annotations

import os
import sys

from tracejudge.client import Tracer


def tracer() -> Tracer:
    """A tracer for the broker in TRACEJUDGE_KAFKA_BOOTSTRAP (the demo's, by default printed by
    `tracejudge demo --serve`), topics under TRACEJUDGE_TOPIC_PREFIX."""
    return Tracer(
        os.environ.get("TRACEJUDGE_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        topic_prefix=os.environ.get("TRACEJUDGE_TOPIC_PREFIX", "tracejudge."),
    )


def report(tracer: Tracer, request_id: str | None) -> int:
    """Wait for the request's evaluation and print it; the exit code says whether it came."""
    if request_id is None or not tracer.flush(15):
        print("the events were not delivered: is the broker up?", file=sys.stderr)
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
        after = "stopped" if made.stopped_after else f"went on {made.steps_after} steps"
        print(f"  intervention: {made.kind} {made.crossed} at step {made.at_step}: {after}")
    return 0
