"""The LLM judge with a real (tiny) model: llama.cpp's server with SmolLM2-135M-Instruct
(tests/llm_server.py) on tau-bench runs; seconds per verdict and agreement with the labels.

    python -m benchmarks.real_judge [--runs 20] [--mode json_schema|tools] [--data DIR]

A 135M model is not the judge anyone would deploy: this measures the path (request, server,
parsing, timing on this machine), and reports its agreement honestly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.agreement import windows
from benchmarks.data import TAU_AIRLINE, require
from tests.llm_server import MODEL_ALIAS, start_llm_server
from tracejudge.judges.llm.breaker import CircuitBreaker
from tracejudge.judges.llm.client import JudgeError, LLMClient, LLMConfig
from tracejudge.judges.llm.prompt import build_input
from tracejudge.prompts import final_judge_prompt

MAX_INPUT_CHARS = 6000


async def main(runs: int, mode: str, data: Path) -> None:
    labels = json.loads((data / "labels.json").read_text())
    chosen = list(windows(data / "events.jsonl").items())[:runs]
    server = start_llm_server(Path(tempfile.mkdtemp(prefix="tracejudge-llm-")) / "server.log")
    config = LLMConfig(
        base_url=server.address,
        model=MODEL_ALIAS,
        timeout_s=300,
        max_attempts=1,
        concurrency=1,
        tool_choice="auto",
        output_mode=mode,
        schema_strict=False,
        max_tokens=2560,
    )
    client = LLMClient(config, final_judge_prompt(), breaker=CircuitBreaker(1000, 1))
    seconds: list[float] = []
    parsed = agree = 0
    errors: dict[str, int] = {}
    try:
        for rid, window in chosen:
            started = time.perf_counter()
            try:
                answer = await client.judge(build_input(window, MAX_INPUT_CHARS).content)
            except JudgeError as exc:
                errors[exc.code] = errors.get(exc.code, 0) + 1
                continue
            finally:
                seconds.append(time.perf_counter() - started)
            parsed += 1
            flagged = answer.incomplete is True or answer.success is False
            agree += flagged == (labels[rid]["reward"] < 1.0)
    finally:
        await client.aclose()
        server.stop()
    print(f"model {MODEL_ALIAS} (llama.cpp, 1 thread), mode {mode}, {len(chosen)} tau runs")
    print(
        f"seconds per verdict: median {statistics.median(seconds):.1f}, "
        f"max {max(seconds):.1f}, total {sum(seconds):.0f}"
    )
    print(f"answers parsed: {parsed}/{len(chosen)}; errors: {errors or 'none'}")
    if parsed:
        print(f"agreement with reward (flagged = not success or incomplete): {agree}/{parsed}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--mode", default="json_schema", choices=["json_schema", "tools"])
    parser.add_argument(
        "--data", type=Path, default=TAU_AIRLINE, help="a folder with events.jsonl, labels.json"
    )
    args = parser.parse_args()
    data = require(args.data, "pass --data tests/data/tau_airline for the 40-run subset")
    asyncio.run(main(args.runs, args.mode, data))
