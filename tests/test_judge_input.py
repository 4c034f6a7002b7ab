"""What decides a run reaches the judge: beyond the step limit the last
steps stay whole and failed steps keep a digest; long texts keep head and tail; a short budget
keeps the goal, the answer and the failed steps first, then the last steps, and says what it
left out; the budget is in tokens, estimated to err high for CJK text too."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.test_rules import GOOD, trace, window_of
from tests.test_windows import store
from tracejudge.judges.llm.prompt import (
    COMPACT,
    build_input,
    estimate_tokens,
    indexes_of,
    input_token_budget,
    ranges,
    shrink_input,
)
from tracejudge.judges.masking.clipping import SNAP
from tracejudge.models.events import SUMMARY_LIMIT, parse_event
from tracejudge.prompts import final_judge_prompt


def block(content: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(content.split("<data>\n")[1].split("\n</data>")[0])
    return data


def call(i: int, ok: bool = True, **fields: Any) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "request_id": "r",
        "step_index": i,
        "tool": "bash",
        "success": ok,
        "args_summary": f"run step {i} " + "a" * 300,
        **fields,
    }


# -- beyond the step limit ---------------------------------------------------------------------


@pytest.mark.parametrize("hold_s", [0.0, 10.0])
async def test_beyond_the_step_limit_the_last_steps_stay_whole_and_failures_keep_a_digest(
    hold_s: float,
) -> None:
    s = store(max_steps=5, tail_steps=4)
    s.hold_s = hold_s
    error = "mvn: [ERROR] compilation failed at Foo.java " + "e" * 3000 + " BUILD FAILURE end"
    for i in range(40):
        failed = i in (12, 20)
        event = call(i, ok=not failed, error=error if failed else None, result_preview="r" * 500)
        assert s.add(parse_event(event), 0, 1.0) == "added"
    window = s.collect("r", "final_response")
    assert window.step_count == 40 and window.steps_dropped == 35
    by_index = {c.step_index: c for c in window.tool_calls}
    for i in range(36, 40):  # the last steps: whole
        assert by_index[i].args_summary == call(i)["args_summary"]
        assert by_index[i].result_preview == "r" * 500
    for i in (12, 20):  # failed: a digest, the head and the tail of the error and the arguments
        digest = by_index[i]
        assert digest.tool == "bash" and digest.success is False
        assert digest.error is not None and len(digest.error) <= 400
        assert digest.error.startswith("mvn: [ERROR]") and digest.error.endswith("FAILURE end")
        assert digest.args_summary is not None and digest.args_summary.startswith(f"run step {i}")
    assert by_index[30].args_summary is None and by_index[30].result_preview is None  # a stub


def test_with_capture_off_no_digest_or_tail_keeps_any_text() -> None:
    s = store(max_steps=5, capture=False)
    for i in range(10):
        s.add(parse_event(call(i, ok=i % 2 == 0, error="secret failure text")), 0, 1.0)
    window = s.collect("r", "final_response")
    assert all(c.error is None and c.args_summary is None for c in window.tool_calls)


# -- clipping ----------------------------------------------------------------------------------


def test_a_long_text_is_clipped_head_and_tail_and_flagged() -> None:
    log = (
        "[INFO] Scanning for projects...\n" + "[INFO] compiling\n" * 6000 + "[ERROR] BUILD FAILURE"
    )
    event = parse_event(call(1, ok=False, result_preview=log, error="exit 1"))
    assert event.type == "tool_call"
    preview = event.result_preview or ""
    # at most the limit: the worker's cut moves to a line break nearby (judges/masking/clipping.py)
    assert SUMMARY_LIMIT - 2 * SNAP <= len(preview) <= SUMMARY_LIMIT and len(log) > 100_000
    assert preview.startswith("[INFO] Scanning") and preview.endswith("[ERROR] BUILD FAILURE")
    assert "…[clipped" in preview and event.clipped == ["result_preview"]


# -- the prompt under a short budget -----------------------------------------------------------


def long_run() -> list[dict[str, Any]]:
    events = trace(GOOD, [(f"tool{i}", i != 30) for i in range(60)])
    for e in events[1:-1]:
        e["result_preview"] = "r" * 400
    events[31]["error"] = "the one failure in the middle: " + "x" * 600
    return events


def test_a_short_budget_keeps_goal_answer_failed_and_last_steps_first() -> None:
    judge_input = build_input(window_of(long_run()), 10_000)
    data = block(judge_input.content)
    kept = [s["i"] for s in data["steps"]]
    assert data["goal"] == "do it" and data["final_output"] == GOOD
    assert 31 in kept  # the failed step in the middle
    assert kept[-10:] == list(range(51, 61))  # then the last steps
    assert judge_input.steps_omitted == 60 - len(kept) > 0


def test_failed_steps_are_shortened_to_digests_before_any_is_left_out() -> None:
    events = trace(GOOD, [(f"tool{i}", False) for i in range(20)])
    for e in events[1:-1]:
        e["error"] = "head of the error " + "y" * 1800 + " tail of the error"
    judge_input = build_input(window_of(events), 16_000)
    data = block(judge_input.content)
    assert [s["i"] for s in data["steps"]] == list(range(1, 21))  # every failed step
    short = [s for s in data["steps"] if s.get("shortened")]
    assert short and judge_input.shortened == len(short)
    assert all(s["error"].endswith("tail of the error") for s in short)
    assert "shortened to a digest" in data["note"]


def test_the_input_says_what_it_left_out_by_kind() -> None:
    events = long_run()
    for i in range(2, 40, 3):  # some reasoning steps among the calls
        events[i] = {
            "type": "reasoning_step",
            "request_id": "r",
            "step_index": i,
            "phase": "plan",
            "intent_summary": "thinking " * 60,
        }
    judge_input = build_input(window_of(events), 6_000)
    data = block(judge_input.content)
    shown = {"tool_call": 0, "reasoning": 0}
    for s in data["steps"]:
        shown[s["type"]] += 1
    assert data["left_out"] == {
        "reasoning": 13 - shown["reasoning"],
        "tool_call": 47 - shown["tool_call"],
    }
    assert judge_input.left_out == data["left_out"]
    assert f"{data['left_out']['reasoning']} reasoning" in data["note"]
    # cut again (a server said the context was too long): the counts add up
    again = block(shrink_input(judge_input.content, 3_000) or "")
    assert sum(again["left_out"].values()) == 60 - len(again["steps"])


# -- tokens ------------------------------------------------------------------------------------


def test_the_token_estimate_errs_high_on_english_and_chinese() -> None:
    english = "The build failed because the test suite could not find the class. " * 100
    assert estimate_tokens(english) >= len(english) / 4  # BPE averages ~4 characters a token
    chinese = "构建失败，因为测试套件找不到这个类。" * 100
    assert estimate_tokens(chinese) == len(chinese)  # one a character at least
    assert estimate_tokens("ab" + "中文") == 1 + 2
    assert estimate_tokens("") == 0


def test_the_input_budget_leaves_room_for_the_prompt_and_the_answer() -> None:
    prompt = final_judge_prompt()
    budget = input_token_budget(8192, 1024, prompt)
    assert 0 < budget < 8192 - 1024 - estimate_tokens(prompt.system)


def chinese_run_at_the_maxima() -> list[dict[str, Any]]:
    """Every text at the contract's limit, in Chinese: the worst case for a character budget."""
    zh = "构建失败测试没有通过请检查日志"
    events: list[dict[str, Any]] = [
        {
            "type": "task_started",
            "request_id": "r",
            "goal": zh * 600,
            "planned_steps": [zh * 133] * 100,
        }
    ]
    for i in range(50):
        events.append(
            call(
                i,
                ok=i % 4 != 0,
                args_summary=zh * 133,
                error=zh * 133 if i % 4 == 0 else None,
                result_preview=zh * 133,
            )
        )
    events.append({"type": "final_response", "request_id": "r", "output": zh * 600})
    return events


@pytest.mark.parametrize("context", [8192, 32768])
@pytest.mark.parametrize("run", ["english", "chinese"])
def test_a_prompt_never_exceeds_its_token_budget(context: int, run: str) -> None:
    events = chinese_run_at_the_maxima() if run == "chinese" else long_run()
    budget = input_token_budget(context, 1024, final_judge_prompt())
    judge_input = build_input(window_of(events), max_tokens=budget)
    assert estimate_tokens(judge_input.content) <= budget
    data = block(judge_input.content)
    last_failed = max(e["step_index"] for e in events[1:-1] if not e["success"])
    assert data["request_id"] == "r" and last_failed in [s["i"] for s in data["steps"]]


# -- repeated failures -------------------------------------------------------------------------

MVN_ERROR = (
    "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-surefire-plugin:3.2.5:test "
    + "(default-test) on project core: There are test failures. " * 8
    + "BUILD FAILURE"
)


def failing_run(commands: list[str], errors: list[str] | None = None) -> list[dict[str, Any]]:
    """A run whose step i runs `commands[i]` with `bash` and fails with `errors[i]`."""
    events = trace(GOOD, [("bash", False) for _ in commands])
    for event, command, error in zip(
        events[1:-1], commands, errors or [MVN_ERROR] * len(commands), strict=True
    ):
        event["args_summary"] = f"cd /repo && {command} -B"
        event["error"] = error
    return events


def merged_entries(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in data["steps"] if "repeated" in s]


def test_repeated_identical_failures_become_one_entry_with_count_and_indexes() -> None:
    judge_input = build_input(window_of(failing_run(["mvn -q test"] * 40)), max_tokens=3_000)
    data = block(judge_input.content)
    [entry] = merged_entries(data)
    whole = [s for s in data["steps"] if s["i"] == 40]  # the last failure stays whole
    assert whole and whole[0]["error"] == MVN_ERROR and "repeated" not in whole[0]
    assert entry["repeated"] == 39 and entry["at"] == "1-39"  # every index, as ranges
    assert entry["tool"] == "bash" and entry["args"] == "cd /repo && mvn -q test -B"
    assert entry["error"].startswith("[ERROR] Failed to execute goal")
    # represented, not omitted
    assert judge_input.merged == 38 and judge_input.steps_omitted == 0
    assert "38 more failed step(s) merged" in data["note"]
    # cut again (a server said the context was too long): still one entry, the same count
    again = block(shrink_input(judge_input.content, 4_000) or "")
    assert [(s["repeated"], s["at"]) for s in merged_entries(again)] == [(39, entry["at"])]


def test_distinct_failures_stay_separate() -> None:
    offline = "[ERROR] offline: artifact not cached " + "z" * 300
    commands = ["mvn -q test", "gradle build"] * 24 + ["ls src"]
    errors = [offline if i % 4 == 2 else MVN_ERROR for i in range(49)]
    judge_input = build_input(window_of(failing_run(commands, errors)), max_tokens=3_000)
    data = block(judge_input.content)
    entries = {(e["args"], e["error"][:15]): e for e in merged_entries(data)}
    # the same command and error head: one entry each; another command or error: another
    assert {k: (v["repeated"], v["at"]) for k, v in entries.items()} == {
        ("cd /repo && mvn -q test -B", "[ERROR] Failed "): (
            12,
            ",".join(map(str, range(1, 49, 4))),
        ),
        ("cd /repo && mvn -q test -B", "[ERROR] offline"): (
            12,
            ",".join(map(str, range(3, 49, 4))),
        ),
        ("cd /repo && gradle build -B", "[ERROR] Failed "): (
            24,
            ",".join(map(str, range(2, 49, 2))),
        ),
    }
    assert [s["i"] for s in data["steps"] if "repeated" not in s] == [49]  # ls: whole, alone
    assert judge_input.merged == 48 - 3 and judge_input.steps_omitted == 0


def test_sixty_identical_failures_fit_an_8k_budget_all_represented() -> None:
    budget = input_token_budget(8192, 1024, final_judge_prompt())
    judge_input = build_input(window_of(failing_run(["mvn -q test"] * 60)), max_tokens=budget)
    assert estimate_tokens(judge_input.content) <= budget
    data = block(judge_input.content)
    represented = sum(int(s.get("repeated", 1)) for s in data["steps"])
    assert represented == 60 and judge_input.steps_omitted == 0
    assert {s["i"] for s in data["steps"]} >= {60}  # the last one among them, whole


# -- many distinct failures: every one still named -----------------------------------------

TOOLS = ("bash", "str_replace_editor", "python", "mvn")


def distinct_failures(n: int, cjk: bool = False) -> list[dict[str, Any]]:
    """A run of `n` failed calls, no two alike, each with a long error, among successes."""
    zh = "编译失败找不到符号请检查类路径"
    calls: list[tuple[str, bool]] = []
    for k in range(n):
        calls.append((TOOLS[k % len(TOOLS)], False))
        if k % 4 == 3:
            calls.append(("bash", True))
    events = trace(GOOD, calls)
    k = 0
    for event in events[1:-1]:
        event["args_summary"] = f"cd /repo && run case {event['step_index']} " + "-x " * 60
        event["result_preview"] = "output line\n" * 80
        if not event["success"]:
            k += 1
            head = f"步骤 {k} 失败：类 Foo{k} " if cjk else f"[ERROR] case {k}: class Foo{k} "
            event["error"] = head + (zh * 100 if cjk else "not found; " * 150) + " FAILURE end"
    return events


def _head(text: str) -> str:
    """What a shown error says for sure of its start: whitespace runs made one space, up to a
    clip mark."""
    text = " ".join(text.split())
    return text.split(" …[clipped ")[0]


def named(data: dict[str, Any]) -> dict[int, tuple[str, str]]:
    """Step index -> (tool, error as shown) for every failed step the judge's input names: a
    step of its own, an index of a merged entry, or of a compact line."""
    found: dict[int, tuple[str, str]] = {}
    for step in data["steps"]:
        shown = (str(step.get("tool")), str(step.get("error") or ""))
        for i in indexes_of(step["at"]) if "at" in step else [step["i"]]:
            found[i] = shown
    for at, tool, head in data.get(COMPACT, []):
        for i in indexes_of(at):
            found.setdefault(i, (tool, head))
    return found


@pytest.mark.parametrize("context", [8192, 32768])
@pytest.mark.parametrize("cjk", [False, True], ids=["english", "chinese"])
def test_four_hundred_distinct_failures_are_each_named_within_the_budget(
    context: int, cjk: bool
) -> None:
    events = distinct_failures(400, cjk)
    failed = {e["step_index"]: e for e in events[1:-1] if not e["success"]}
    budget = input_token_budget(context, 1024, final_judge_prompt())
    judge_input = build_input(window_of(events), max_tokens=budget)
    assert estimate_tokens(judge_input.content) <= budget
    data = block(judge_input.content)
    found = named(data)
    for i, event in failed.items():  # its index, its tool and the head of its error
        assert i in found, f"failed step {i} not in the judge's input"
        tool, shown = found[i]
        assert tool == event["tool"]
        assert _head(shown) and _head(event["error"]).startswith(_head(shown)), (i, shown)
    last = max(failed)
    assert [s["error"] for s in data["steps"] if s["i"] == last] == [failed[last]["error"]]
    assert judge_input.steps_omitted == judge_input.left_out.get("tool_call", 0)  # no failure
    if COMPACT in data:
        assert judge_input.compacted == sum(len(indexes_of(at)) for at, _, _ in data[COMPACT])
        assert f"{judge_input.compacted} more failed step(s) listed only in" in data["note"]
        assert judge_input.cuts["failed_steps_listed_compactly"] == judge_input.compacted
    if context == 8192:  # the smallest room: compact lines, one per tool and error head
        assert judge_input.compacted > 300
        assert len({(tool, head) for _, tool, head in data[COMPACT]}) == len(data[COMPACT])
    # cut again to half (a server said the context was too long): the lines regrouped, those
    # that no longer fit beside the last failure whole counted as left out
    again = block(shrink_input(judge_input.content, len(judge_input.content) // 2) or "")
    still = named(again)
    assert last in still and all(still[i][0] == failed[i]["tool"] for i in failed if i in still)
    assert (
        len(still) + again["left_out"].get("failed_step", 0) + again["left_out"].get("tool_call", 0)
        == len(events) - 2
    )


def test_step_indexes_are_written_as_ranges_and_read_back() -> None:
    assert ranges([9, 3, 4, 5, 12, 13, 7, 3]) == "3-5,7,9,12-13"
    assert indexes_of("3-5,7,9,12-13") == [3, 4, 5, 7, 9, 12, 13]
    assert ranges([]) == "" and indexes_of("") == [] and indexes_of("x,2-,4") == [4]
    assert len(indexes_of("0-999999999")) == 100_000  # a corrupted block stays bounded
