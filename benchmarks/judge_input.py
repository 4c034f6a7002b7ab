"""What of a run reaches the LLM judge, on the shared coding and airline runs (../shared/data,
benchmarks/data.py) through the worker's own path: its handlers, window store (step limit, held
steps) and verdict making, at default settings with the LLM judge on, each closed run's judge
job collected instead of sent.

    python -m benchmarks.judge_input [--data DIR] [--context-tokens N ...] [--sample-rate R]

Per set and context size it prints, for the runs with a failed call: the share whose last failed
call's text (its error, else its result, as the contract keeps it, masked as the judge sees it)
is in the judge's input whole; where the run ended on a harness limit marker
(judges/rules/endings.py LIMIT), the share whose agent's own last failed command is; the share
of all failed calls represented; and the prompts whose estimated tokens (input, system prompt,
schema, output reserve) exceed the context. Then the same budget check on a synthetic Chinese
run with every text at the contract's maxima.

A failed call is represented when its step index and its tool appear together with at least
the head of its error (its error, else its result, masked): as a step of its own (whole, a
digest or a brief), as one of the step indexes of an entry merging a repeated failure, or of a
line of `failed_steps_compact` ([step indexes, tool, error head], one per failure or per group
sharing tool and error head). The head shown, whitespace runs made one space and cut at any
clip mark, must be non-empty and begin the call's own text so cut; a call with no text at all
needs only its index and tool. How many are represented only by a compact line, and the median
length of the head shown for them, are printed too: a line names a failure, no more.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.data import SHARED_DATA, require
from tracejudge.judges.llm.prompt import CLOSE, COMPACT, OPEN, estimate_tokens, indexes_of
from tracejudge.judges.masking.redact import mask
from tracejudge.judges.rules.endings import LIMIT
from tracejudge.judges.verdict.conclude import JudgeJob
from tracejudge.models import names
from tracejudge.models.events import parse_event
from tracejudge.prompts import final_judge_prompt
from tracejudge.settings import Settings
from tracejudge.streams.kafka.records import InRecord
from tracejudge.streams.replay.engine import CollectingChannel, MemoryLookup, lines_of
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


MARK = " …[clipped "  # how a clip mark begins (models/events.py): the tail follows it


def _head(text: str) -> str:
    """A text's head: whitespace runs made one space, up to any clip mark."""
    text = " ".join(text.split())
    mark = text.find(MARK)
    return text if mark < 0 else text[:mark]


def _begins(shown: Any, own: str | None) -> bool:
    """What is shown of an error begins as the call's own (masked) text: at least its head."""
    if not own:
        return True  # nothing went wrong in words: its index and tool are all there is
    if not isinstance(shown, str):
        return False
    head = _head(shown)
    return bool(head) and _head(mask(own)).startswith(head)


def represented(call: dict[str, Any], data: dict[str, Any]) -> str | None:
    """How the judge's input represents a failed call: "step", "merged", "compact" or None."""
    i, tool, own = call["step_index"], call["tool"], _text(call)
    for step in data.get("steps", []):
        if step.get("tool") != tool or not _begins(step.get("error") or step.get("result"), own):
            continue
        if step.get("i") == i:
            return "step"
        at = step.get("at")
        if i in (indexes_of(at) if isinstance(at, str) else at if isinstance(at, list) else []):
            return "merged"
    for line in data.get(COMPACT, []):
        if line[1] == tool and i in indexes_of(line[0]) and _begins(line[2], own):
            return "compact"
    return None


@dataclass
class Figures:
    with_failure: int = 0
    last_failure_whole: int = 0
    at_limit: int = 0
    own_failure_whole: int = 0
    failed_calls: int = 0
    failed_present: int = 0
    failed_merged: int = 0  # of failed_present: inside an entry merging a repeated failure
    failed_compact: int = 0  # of failed_present: only in a line of failed_steps_compact
    compact_heads: list[int] = field(default_factory=list)  # the head's length for each
    prompts: int = 0
    over_budget: int = 0
    missed: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # each prompt's, estimated (for sizing)

    def lines(self, name: str, context: int) -> list[str]:
        def share(a: int, b: int) -> str:
            return f"{a}/{b} ({a / b:.1%})" if b else "none"

        heads = self.compact_heads
        median = f"{statistics.median(heads):g}" if heads else "-"
        rows = (
            ("last failed call's text whole", share(self.last_failure_whole, self.with_failure)),
            ("at a limit marker: own last failure", share(self.own_failure_whole, self.at_limit)),
            ("failed calls represented", share(self.failed_present, self.failed_calls)),
            ("  of these, inside a merged repeat", str(self.failed_merged)),
            ("  only in a compact line", str(self.failed_compact)),
            ("  its error head, median characters", median),
            ("prompts over the budget", str(self.over_budget)),
            ("prompt tokens, estimated: median, p90", _spread(self.tokens)),
        )
        header = f"== {name}, context {context} tokens: {self.prompts} judge inputs"
        return [header, *(f"  {label:<39}{value}" for label, value in rows)]


def _spread(values: list[int]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(ordered):,.0f}, {p90:,}"


def measure(
    events: dict[str, list[dict[str, Any]]], inputs: dict[str, str], context: int, reserve: int
) -> Figures:
    prompt = final_judge_prompt()
    fixed = estimate_tokens(prompt.system) + estimate_tokens(json.dumps(prompt.schema))
    figures = Figures()
    for rid, content in inputs.items():
        figures.prompts += 1
        figures.tokens.append(estimate_tokens(content) + fixed)
        if estimate_tokens(content) + fixed + reserve > context:
            figures.over_budget += 1
        data = block(content)
        steps = {s.get("i"): s for s in data.get("steps", [])}
        calls = [e for e in events[rid] if e["type"] == "tool_call"]
        failed = [c for c in calls if not c["success"]]
        figures.failed_calls += len(failed)
        for c in failed:
            how = represented(c, data)
            figures.failed_present += how is not None
            figures.failed_merged += how == "merged"
            if how == "compact":
                figures.failed_compact += 1
                figures.compact_heads.extend(
                    len(line[2]) for line in data[COMPACT] if c["step_index"] in indexes_of(line[0])
                )
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


def settings_for(context: int, sample_rate: float = 1.0) -> Settings:
    """The default selection (TRACEJUDGE_LLM_SAMPLE_RATE 1: every run) unless `sample_rate` is
    given: then every flagged run and that share of the others, so each set's header counts
    the judge inputs, and so the calls, that rate makes."""
    return Settings(
        redis_url="",
        llm_judge_enabled=True,
        llm_base_url="http://127.0.0.1:9/v1",
        worker_judges=False,
        llm_judge_flagged=True,
        llm_sample_rate=sample_rate,
        llm_context_tokens=context,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--context-tokens", type=int, action="append")
    parser.add_argument(
        "--sample-rate", type=float, default=1.0, help="TRACEJUDGE_LLM_SAMPLE_RATE (default 1)"
    )
    args = parser.parse_args()
    require(args.data, "this benchmark needs the shared coding and airline runs")
    logging.getLogger("tracejudge").setLevel(logging.WARNING)
    contexts = tuple(args.context_tokens or CONTEXTS)
    met = True
    for context in contexts:
        settings = settings_for(context, args.sample_rate)
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
