"""What of a run reaches the LLM judge (issue 38, items 1 and 2), on the shared coding and
airline runs (../shared/data, benchmarks/data.py) through the worker's own path: its handlers,
window store (step limit, held steps) and verdict making, at default settings with the LLM
judge on, each closed run's judge job collected instead of sent.

    python -m benchmarks.judge_input [--data DIR] [--context-tokens N ...]

Per set and context size it prints, for the runs with a failed call: the share whose last failed
call's text (its error, else its result, as the contract keeps it, masked as the judge sees it)
is in the judge's input whole; where the run ended on a harness limit marker
(judges/signals.py LIMIT), the share whose agent's own last failed command is; the share of all
failed calls present at least as a digest, or inside an entry merging a repeated failure
(one entry, its count and step indexes, for failed calls with the same tool, arguments and
error head; such a call is counted when an entry of its tool, whose step indexes span it and
whose arguments and error begin as its own, still has count left for it); and the prompts
whose estimated tokens (input, system prompt, schema, output reserve) exceed the context. Then
the same budget check on a synthetic Chinese run with every text at the contract's maxima.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.data import SHARED_DATA, require
from tracejudge.judges.llm.prompt import CLOSE, OPEN, estimate_tokens
from tracejudge.judges.redact import mask
from tracejudge.judges.signals import LIMIT
from tracejudge.judges.verdicts import JudgeJob
from tracejudge.models import names
from tracejudge.models.events import parse_event
from tracejudge.prompts import final_judge_prompt
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.replay.engine import CollectingChannel, MemoryLookup, lines_of
from tracejudge.streams.settings import Settings
from tracejudge.streams.worker.context import Channels, Tables, WorkerContext

SETS = ("swe_java", "tau_airline")
CONTEXTS = (8192, 32768)
GOAL = 0.95


def _stop(reason: str, exc: BaseException) -> Any:
    raise RuntimeError(reason) from exc


async def judge_inputs(
    settings: Settings, records: list[tuple[bytes | None, bytes]]
) -> dict[str, str]:
    """request_id -> the judge's input the worker made at close (every run sampled)."""
    channels = Channels(*(CollectingChannel() for _ in range(8)))
    ctx = WorkerContext.build(
        settings, channels, Tables({}, {}, {}), None, lookup=MemoryLookup(), exit=_stop
    )
    ctx.partitions.observe({p: 0 for p in range(settings.partitions)}, {})
    topic = settings.topic(names.EVENTS)
    for offset, (key, value) in enumerate(records):
        await ctx.errors.run(InRecord(topic, 0, offset, key or b"", value, {}), ctx.events)
    for rid in list(ctx.store.open):
        await ctx.events.closer.close(rid, "idle_timeout")
    await asyncio.sleep(0)  # publishing is scheduled: let it run
    queue = channels.judge_requests
    assert isinstance(queue, CollectingChannel)
    jobs = [JudgeJob.model_validate_json(v) for _, v in queue.sent if v is not None]
    return {job.facts.request_id: job.content for job in jobs}


def block(content: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(content.split(f"{OPEN}\n", 1)[1].rsplit(f"\n{CLOSE}", 1)[0])
    return data


def _text(call: dict[str, Any]) -> str | None:
    return call.get("error") or call.get("result_preview")


def _shown(step: dict[str, Any] | None, text: str) -> bool:
    return step is not None and mask(text) in (step.get("error"), step.get("result"))


HEAD = 20  # characters every form of a text keeps at its start (a brief keeps ~21 of arguments)


def _merged_count(failed: list[dict[str, Any]], steps: dict[Any, dict[str, Any]]) -> int:
    """The failed calls not shown as a step of their own that a merged entry stands for."""
    left = [c for c in failed if c["step_index"] not in steps]
    counted = 0
    for entry in (s for s in steps.values() if isinstance(s.get("repeated"), int)):
        at = [i for i in entry.get("at", []) if isinstance(i, int)]
        if not at:
            continue

        def same(c: dict[str, Any], entry: dict[str, Any] = entry, at: list[int] = at) -> bool:
            return (
                c["tool"] == entry.get("tool")
                and min(at) <= c["step_index"] <= max(at)
                and mask(c.get("args_summary") or "")[:HEAD] == str(entry.get("args"))[:HEAD]
                and mask(_text(c) or "")[:HEAD] == str(entry.get("error"))[:HEAD]
            )

        matching = [c for c in left if same(c)]
        listed = {i for i in at if i != entry.get("i")}
        if not listed <= {c["step_index"] for c in matching}:
            continue  # an index it lists is not such a call: not trusted
        take = matching[: entry["repeated"] - 1]  # its own "i" is shown already
        counted += len(take)
        left = [c for c in left if c not in take]
    return counted


@dataclass
class Figures:
    with_failure: int = 0
    last_failure_whole: int = 0
    at_limit: int = 0
    own_failure_whole: int = 0
    failed_calls: int = 0
    failed_present: int = 0
    failed_merged: int = 0  # of failed_present: inside an entry merging a repeated failure
    prompts: int = 0
    over_budget: int = 0
    missed: list[str] = field(default_factory=list)

    def lines(self, name: str, context: int) -> list[str]:
        def share(a: int, b: int) -> str:
            return f"{a}/{b} ({a / b:.1%})" if b else "none"

        rows = (
            ("last failed call's text whole", share(self.last_failure_whole, self.with_failure)),
            ("at a limit marker: own last failure", share(self.own_failure_whole, self.at_limit)),
            ("failed calls shown (digest or more)", share(self.failed_present, self.failed_calls)),
            ("  of these, inside a merged repeat", str(self.failed_merged)),
            ("prompts over the budget", str(self.over_budget)),
        )
        header = f"== {name}, context {context} tokens: {self.prompts} judge inputs"
        return [header, *(f"  {label:<39}{value}" for label, value in rows)]


def measure(
    events: dict[str, list[dict[str, Any]]], inputs: dict[str, str], context: int, reserve: int
) -> Figures:
    prompt = final_judge_prompt()
    fixed = estimate_tokens(prompt.system) + estimate_tokens(json.dumps(prompt.schema))
    figures = Figures()
    for rid, content in inputs.items():
        figures.prompts += 1
        if estimate_tokens(content) + fixed + reserve > context:
            figures.over_budget += 1
        data = block(content)
        steps = {s.get("i"): s for s in data.get("steps", [])}
        calls = [e for e in events[rid] if e["type"] == "tool_call"]
        failed = [c for c in calls if not c["success"]]
        figures.failed_calls += len(failed)
        merged = _merged_count(failed, steps)
        figures.failed_merged += merged
        figures.failed_present += sum(1 for c in failed if c["step_index"] in steps) + merged
        with_text = [c for c in failed if _text(c)]
        if with_text:
            figures.with_failure += 1
            last = with_text[-1]
            if _shown(steps.get(last["step_index"]), _text(last) or ""):
                figures.last_failure_whole += 1
            else:
                figures.missed.append(rid)
        limit_ended = any(LIMIT.search(c["tool"]) for c in calls[-3:]) or any(
            LIMIT.search(c.get("error") or "") for c in calls[-3:]
        )
        own = [c for c in with_text if not LIMIT.search(c["tool"])]
        if limit_ended and own:
            figures.at_limit += 1
            if _shown(steps.get(own[-1]["step_index"]), _text(own[-1]) or ""):
                figures.own_failure_whole += 1
    return figures


def parsed_events(raw: bytes) -> dict[str, list[dict[str, Any]]]:
    """Each run's events as the worker keeps them (clipped on arrival), up to its answer."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    done: set[str] = set()
    for line in raw.splitlines():
        event = parse_event(line).model_dump()
        rid = event["request_id"]
        if rid not in done:
            runs[rid].append(event)
        if event["type"] == "final_response":
            done.add(rid)
    return runs


def chinese_run(limit_steps: int = 60) -> list[tuple[bytes | None, bytes]]:
    """One run with every text at the contract's maxima, in Chinese: the worst case for a
    character budget (one token a character)."""
    zh = "构建失败测试没有通过请检查日志"
    rid = "zh-maxima"
    events: list[dict[str, Any]] = [
        {
            "type": "task_started",
            "request_id": rid,
            "goal": zh * 534,
            "planned_steps": [zh * 133] * 100,
        }
    ]
    for i in range(1, limit_steps + 1):
        failed = i % 3 == 0
        events.append(
            {
                "type": "tool_call",
                "request_id": rid,
                "step_index": i,
                "tool": "bash",
                "success": not failed,
                "args_summary": zh * 133,
                "error": zh * 133 if failed else None,
                "result_preview": zh * 133,
            }
        )
    events.append({"type": "final_response", "request_id": rid, "output": zh * 534})
    return [(rid.encode(), json.dumps(e, ensure_ascii=False).encode()) for e in events]


def settings_for(context: int) -> Settings:
    return Settings(
        redis_url="",
        llm_judge_enabled=True,
        llm_base_url="http://127.0.0.1:9/v1",
        worker_judges=False,
        llm_judge_flagged=True,
        llm_sample_rate=1.0,
        llm_context_tokens=context,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--context-tokens", type=int, action="append")
    args = parser.parse_args()
    require(args.data, "this benchmark needs the shared coding and airline runs")
    logging.getLogger("tracejudge").setLevel(logging.WARNING)
    contexts = tuple(args.context_tokens or CONTEXTS)
    met = True
    for context in contexts:
        settings = settings_for(context)
        reserve = settings.llm_output_reserve_tokens or settings.llm_max_tokens
        for name in SETS:
            raw = (args.data / name / "events.jsonl").read_bytes()
            inputs = asyncio.run(judge_inputs(settings, lines_of(raw)))
            figures = measure(parsed_events(raw), inputs, context, reserve)
            print("\n".join(figures.lines(name, context)), flush=True)
            met &= figures.over_budget == 0
            if name == "swe_java":
                for a, b in (
                    (figures.last_failure_whole, figures.with_failure),
                    (figures.own_failure_whole, figures.at_limit),
                    (figures.failed_present, figures.failed_calls),
                ):
                    met &= b == 0 or a / b >= GOAL
        zh = chinese_run()
        inputs = asyncio.run(judge_inputs(settings, zh))
        runs = parsed_events(b"\n".join(v for _, v in zh))
        figures = measure(runs, inputs, context, reserve)
        print("\n".join(figures.lines("chinese run at the contract's maxima", context)))
        met &= figures.over_budget == 0
    print(f"goals (>= {GOAL:.0%}, 0 over budget) {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
