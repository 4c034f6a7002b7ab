"""Failure modes from what a verdict knows: errors folded into templates, signatures and names."""

from __future__ import annotations

from tracejudge.judges.modes.errors import template
from tracejudge.judges.modes.signature import signature_of


def test_the_same_failure_with_other_ids_is_one_template() -> None:
    a = template("Error: flight HAT030 not available on date 2024-05-13")
    b = template("Error: flight UA112 not available on date 2024-06-01")
    assert a == b == "Error: flight <ID> not available on date <DATE>"
    assert template("HTTP 503 from https://pay.example/v1/refund/123") == "HTTP 503 from <URL>"
    assert template("HTTP 503 x") != template("HTTP 502 x")  # the status is kept
    raised = "exitcode: 1 (execution failed)\nCode output: Traceback (most recent call last):\n"
    raised += "  File \"a.py\", line 3\nModuleNotFoundError: No module named 'pandas'"
    assert template(raised) == "ModuleNotFoundError: No module named <STR>"
    assert template(None) is None and template("  ") is None
    assert len(template("x" * 100_000) or "") <= 160


def test_a_failing_tool_names_its_mode_with_its_error_and_the_call_before_it() -> None:
    evaluation = {
        "passed": False, "success": False, "incomplete": True, "agent_name": "shop",
        "failed_steps": [{"index": 3, "tool": "refund_order", "reason": "HTTP 503 (req 8f3a2c91)"}],
    }  # fmt: skip
    sig = signature_of(evaluation, tools=["lookup_order", "refund_order"])
    assert sig is not None
    assert sig.name() == "refund_order fails with HTTP 503 (req <HEX>) after lookup_order"
    other = {
        **evaluation,
        "failed_steps": [{"tool": "refund_order", "reason": "HTTP 503 (req 77aa11bb)"}],
    }
    again = signature_of(other, tools=["lookup_order", "refund_order"])
    assert again is not None and again.key("shop") == sig.key("shop") != sig.key("other-agent")


def test_clean_passes_have_no_mode_and_rules_checks_and_stops_name_theirs() -> None:
    assert signature_of({"passed": True, "success": True, "incomplete": False}) is None
    base = {"passed": False, "success": True, "incomplete": True}
    rule = signature_of({**base, "findings": [{"rule": "pending_action", "evidence": ""}]})
    assert rule is not None and rule.name() == "leaves an action it promised pending"
    check = signature_of({**base, "findings": [{"rule": "check:needs_confirmation"},
                                               {"rule": "pending_action"}]})  # fmt: skip
    assert check is not None and check.name() == "the team's check needs_confirmation fails"
    stop = {"kind": "loop", "crossed": "repeat", "action": "stop", "stopped_after": True}
    stopped = signature_of({**base, "interventions": [stop]})
    assert stopped is not None and stopped.name() == "stopped by a loop repeat"
