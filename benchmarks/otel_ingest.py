"""What `tracejudge otel` spends mapping a span to events, side by side with an earlier tree's
mapping, on spans real instrumentations wrote (tests/data/otel: pydantic-ai, OpenInference's
LangChain, CrewAI, OpenAI and smolagents instrumentors, openlit; content capture on).

    python -m benchmarks.otel_ingest [--base REF] [--rounds N]

Each round maps every recorded export batch once (parsed protobuf in hand: the receiver's own
decoding is the same for both), one mapper per round as one receiver; the two mappings take
turns, round by round. Prints each one's lowest and median microseconds of CPU per span (the
thread's own time: the machine is shared). `--base`: the git ref whose `client/otel_mapping.py`
(its `events_of` and `AgentNames`, as the receiver then called them) is the other side.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.instrumentations import batches
from tracejudge.client.otel_mapping import SpanInfo
from tracejudge.settings import Settings
from tracejudge.streams.receiver.receiver import BatchMapper, spans_of

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "otel"

Mapping = Callable[[list[list[SpanInfo]]], int]


def recorded() -> list[list[SpanInfo]]:
    found = []
    for path in sorted(DATA.glob("*.b64.gz")):
        for raw in batches(path):
            request = ExportTraceServiceRequest()
            request.ParseFromString(raw)
            found.append(spans_of(request))
    return found


def current() -> Mapping:
    settings = Settings(redis_url="", otel_capture_content=True)

    def run(all_batches: list[list[SpanInfo]]) -> int:
        mapper = BatchMapper(settings)
        return sum(len(mapper.events_of(spans)) for spans in all_batches)

    return run


def base(ref: str) -> Mapping:
    """The mapping of `ref`, loaded from its source as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{ref}:client/otel_mapping.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    folder = Path(tempfile.mkdtemp())
    path = folder / "base_otel_mapping.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("base_otel_mapping", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)

    def run(all_batches: list[list[SpanInfo]]) -> int:
        count = 0
        for spans in all_batches:
            old = [module.SpanInfo(*astuple_of(s)) for s in spans]
            agents = module.AgentNames.of(old)
            for span in old:
                count += len(module.events_of(span, True, "local_root", agents))
        return count

    return run


def astuple_of(span: SpanInfo) -> tuple[object, ...]:
    """The fields the earlier SpanInfo had, in its order."""
    return (
        span.trace_id,
        span.span_id,
        span.parent_span_id,
        span.name,
        span.start_ns,
        span.end_ns,
        span.attributes,
        span.status_code,
        span.status_message,
        span.parent_remote,
    )


def cpu_us_per_span(run: Mapping, all_batches: list[list[SpanInfo]], spans: int) -> float:
    start = time.thread_time()
    run(all_batches)
    return (time.thread_time() - start) / spans * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="13ff147", help="git ref of the other mapping")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    all_batches = recorded()
    spans = sum(len(b) for b in all_batches)
    systems: dict[str, Mapping] = {"current": current(), f"base {args.base}": base(args.base)}
    times: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(args.rounds):
        for name, run in systems.items():
            times[name].append(cpu_us_per_span(run, all_batches, spans))
    print(f"{spans} spans in {len(all_batches)} export batches, {args.rounds} rounds")
    for name, found in times.items():
        print(
            f"{name:>16}: lowest {min(found):7.1f} us/span, median {statistics.median(found):7.1f}"
        )
    low = {name: min(found) for name, found in times.items()}
    names = list(low)
    print(f"current / base: {low[names[0]] / low[names[1]]:.2f}x (lowest of each)")


if __name__ == "__main__":
    main(sys.argv[1:])
