"""Patches, code, logs and JSON are read as what they are; the signals that hold for any agent."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_rules import judge, window_of
from tracejudge.judges.text.kinds import split

PATCH = """Submitted patch:
diff --git a/src/app/Ids.java b/src/app/Ids.java
index 1b4acde6..aea9b85a 100644
--- a/src/app/Ids.java
+++ b/src/app/Ids.java
@@ -10,3 +10,4 @@ public class Ids {
-    return 12345;
+    # Replace 12345 with actual issue number if known, but I don't know it
+    return next();
 }
"""


def run(output: str, calls: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "task_started", "request_id": "t", "goal": "fix the id bug in Ids.java"}
    ]
    for i, call in enumerate(calls or [], start=1):
        events.append({"type": "tool_call", "request_id": "t", "step_index": i, **call})
    events.append({"type": "final_response", "request_id": "t", "step_index": 99, "output": output})
    return events


def fired(output: str, calls: list[dict[str, Any]] | None = None) -> list[str]:
    return [rule for rule, _ in judge.judge(window_of(run(output, calls))).findings]


def test_a_patch_is_not_read_as_prose_the_words_around_it_are() -> None:
    assert split(PATCH).artifact and split(PATCH).prose == "Submitted patch:"
    verdict = judge.judge(window_of(run(PATCH)))
    assert verdict.findings == [] and not verdict.incomplete and verdict.rule_score >= 90
    said = "I could not find the issue number, so the fix is partial.\n" + PATCH
    assert "admitted_failure" in fired(said)


@pytest.mark.parametrize(
    "artifact",
    [
        '{"status": "error", "message": "could not be completed"}',
        "```\nERROR: an error occurred while saving\n```",
        "2026-11-25 10:00:01 ERROR could not connect\n2026-11-25 10:00:02 INFO retrying",
        'Traceback (most recent call last):\n  File "a.py", line 3\nValueError: I failed to',
    ],
)
def test_json_code_blocks_and_logs_are_not_claims(artifact: str) -> None:
    assert split(artifact).prose == "" and split(artifact).artifact
    assert "admitted_failure" not in fired(artifact)


def test_an_empty_submission_is_nothing_submitted() -> None:
    assert "placeholder_answer" in fired("Submitted patch:\n")
    assert "placeholder_answer" in fired("")


@pytest.mark.parametrize(
    "how",
    [
        {"tool": "exit_cost", "success": False, "error": "exit_cost: Exited (autosubmitted)"},
        {"tool": "agent", "success": False, "error": "MaxTurnsExceeded: Max turns (10) exceeded"},
        {
            "tool": "graph",
            "success": False,
            "error": "GraphRecursionError: Recursion limit of 25 reached without a stop",
        },
    ],
)
def test_a_run_stopped_at_a_limit_is_said_so_and_not_success(how: dict[str, Any]) -> None:
    calls = [{"tool": "edit", "args_summary": "edit 1:2", "success": True}, how]
    verdict = judge.judge(window_of(run(PATCH, calls)))
    assert "stopped_at_limit" in [rule for rule, _ in verdict.findings]
    assert not verdict.success and not verdict.incomplete  # what was submitted may be whole
    stopped = judge.judge(
        window_of(run("Agent stopped due to iteration limit or time limit.", calls[:1]))
    )
    assert "stopped_at_limit" in [rule for rule, _ in stopped.findings]


def test_a_claim_the_last_result_contradicts() -> None:
    failing = {
        "tool": "bash",
        "args_summary": "mvn test",
        "success": True,
        "result_preview": "Tests run: 12, Failures: 2\nBUILD FAILURE",
    }
    assert "claim_contradicts_result" in fired("The fix is in and all tests pass.", [failing])
    passing = {**failing, "result_preview": "Tests run: 12, Failures: 0\nBUILD SUCCESS"}
    assert "claim_contradicts_result" not in fired("The fix is in and all tests pass.", [passing])
    assert "claim_contradicts_result" not in fired("Two tests still do not pass.", [failing])


def test_errors_fixed_later_cost_little_the_run_ending_on_one_costs_much() -> None:
    fixed = [
        {"tool": "bash", "args_summary": "javac A.java", "success": False, "error": "1 error"},
        {"tool": "edit", "args_summary": "edit 3:3", "success": True},
        {"tool": "bash", "args_summary": "javac A.java", "success": True},
    ]
    recovered = judge.judge(window_of(run(PATCH, fixed)))
    ended = judge.judge(window_of(run(PATCH, [*fixed[:2], fixed[0]])))
    assert recovered.success and recovered.execution_health >= 90
    assert not ended.success and ended.execution_health <= 50
    assert "last_attempt_failed" in [rule for rule, _ in ended.findings]


def test_a_patch_that_only_adds_files_changed_nothing_that_was_there() -> None:
    added = (
        "diff --git a/Reproduce.java b/Reproduce.java\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/Reproduce.java\n@@ -0,0 +1 @@\n+class Reproduce {}\n"
    )
    assert "patch_adds_only" in fired(added)
    assert "patch_adds_only" not in fired(PATCH)
