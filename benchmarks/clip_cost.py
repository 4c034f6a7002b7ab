"""What cutting texts off secrets (judges/masking/clipping.py) costs the judge's input, which the
worker builds on its event loop as a request closes.

    python -m benchmarks.clip_cost [--plain] [--data DIR] [--repeat N]

Times `build_input` per request (a) on synthetic runs of 200 steps with 66 failures of ~1,900
characters each at an 8k-token context: log lines, one long line with spaces, one minified JSON
line (the most a detector has to read around a cut), each built `--repeat` times with the clip
caches empty (a closing request's texts are new to them); (b) on the shared coding and airline
runs (../shared/data) through the worker's own path (benchmarks/judge_input.py: handlers, window
store, verdict making, 8k context), every `build_input` the worker calls timed. Prints median,
p99 and max milliseconds of CPU per request (the thread's own time: the
machine is shared).

`--plain`: the cut as it was before judges/masking/clipping.py (`models.events.clip`, through
secrets), for the comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tracejudge.judges.llm.prompt as prompt
import tracejudge.judges.verdict.make as making
import tracejudge.judges.windows.records as records
import tracejudge.judges.windows.timeline as timeline
from benchmarks.data import SHARED_DATA, require
from benchmarks.judge_input import judge_inputs, settings_for
from tracejudge.judges.masking import clipping
from tracejudge.models.events import clip, parse_event
from tracejudge.models.window import Window, assemble_window
from tracejudge.streams.replay.engine import lines_of

CONTEXT = 8192
SETS = ("swe_java", "tau_airline")


def plain() -> None:
    """The plain cut where `clip_whole` is used (the code as it was)."""
    for module in (prompt, records, timeline):
        module.clip_whole = clip  # type: ignore[attr-defined]


def clear() -> None:
    clipping.clip_whole.cache_clear()
    clear_scans = getattr(clipping, "clear_caches", None)
    if clear_scans is not None:
        clear_scans()


def synthetic(text: str, steps: int = 200) -> Window:
    """`steps` calls, every third failing with `text` (and every one returning it)."""
    events: list[dict[str, Any]] = [{"type": "task_started", "request_id": "r", "goal": "build"}]
    for i in range(1, steps + 1):
        failed = i % 3 == 0
        events.append(
            {
                "type": "tool_call",
                "request_id": "r",
                "step_index": i,
                "tool": "bash",
                "success": not failed,
                "args_summary": f"mvn -q step {i} " + "a" * 300,
                "result_preview": f"{i} {text}",
                "error": f"{i} {text}" if failed else None,
            }
        )
    events.append({"type": "final_response", "request_id": "r", "output": "no"})
    parsed = [parse_event(e) for e in events]
    return assemble_window(
        "r", parsed, closed_by="final_response", step_count=steps, steps_dropped=0
    )


SYNTHETIC = {
    "log lines": "[INFO] start of the build\n"
    + "[INFO] building module alpha ok\n" * 57
    + "[ERROR] BUILD FAILURE",
    "one line, spaces": "x=1 " * 470,
    "minified JSON": json.dumps(
        [{"id": i, "name": f"item{i}", "ok": True} for i in range(60)], separators=(",", ":")
    )[:1880],
}


def spread(ms: list[float]) -> str:
    ordered = sorted(ms)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"median {statistics.median(ordered):.1f}, p99 {p99:.1f}, max {ordered[-1]:.1f} ms"


def timed(calls: list[float], build: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return build(*args, **kwargs)
        finally:
            calls.append((time.thread_time() - start) * 1e3)

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plain", action="store_true", help="the plain cut, for comparison")
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.plain:
        plain()
    label = "plain cut" if args.plain else "clip_whole"
    for name, text in SYNTHETIC.items():
        window = synthetic(text)
        ms = []
        for _ in range(args.repeat):
            clear()
            start = time.thread_time()
            prompt.build_input(window, max_tokens=8000)  # as measured in 578eac6
            ms.append((time.thread_time() - start) * 1e3)
        print(f"{label}: synthetic, {name}: {spread(ms)}", flush=True)
    calls: list[float] = []
    making.build_input = timed(calls, making.build_input)  # type: ignore[attr-defined]
    settings = settings_for(CONTEXT)
    for name in SETS:
        raw = require(args.data / name / "events.jsonl", "needs the shared runs").read_bytes()
        calls.clear()
        clear()
        asyncio.run(judge_inputs(settings, lines_of(raw)))
        print(f"{label}: {name}, {len(calls)} requests: {spread(calls)}", flush=True)


if __name__ == "__main__":
    main()
