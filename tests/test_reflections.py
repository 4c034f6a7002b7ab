"""The reflection worker's pieces that need no broker: the follow-up's id and how its run is
recorded (the worker's own parser reads it). Delivery, retries and timeouts are tested on the
real broker in tests/integration/test_reflection_worker.py."""

from __future__ import annotations

from typing import Any

import pytest

from tracejudge.client.events import Recorder
from tracejudge.client.reflections import ReflectionWorker, follow_up_request_id
from tracejudge.models.events import TaskStarted, parse_event


def test_a_follow_up_id_depends_on_the_reflection_alone() -> None:
    assert follow_up_request_id("r-1") == follow_up_request_id("r-1")
    assert follow_up_request_id("r-1") != follow_up_request_id("r-2")


def recorded(**kwargs: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    def send(event: dict[str, Any]) -> bool:
        sent.append(event)
        return True

    run = Recorder(send, "send the confirmation", **kwargs)
    run.tool_call("send_confirmation", success=True)
    run.final("sent")
    return sent


def test_a_follow_up_names_its_origin_and_round_and_a_redone_run_keeps_its_steps_apart() -> None:
    common = {"request_id": "f-1", "parent_request_id": "origin-1", "reflection_round": 2}
    first, again = recorded(run_token="aaaa", **common), recorded(run_token="bbbb", **common)
    task = parse_event(first[0])
    assert isinstance(task, TaskStarted)
    assert (task.parent_request_id, task.reflection_round) == ("origin-1", 2)
    # the start is one event however often it is sent; the steps of two runs never collide
    assert first[0]["event_id"] == again[0]["event_id"] == "f-1:0"
    assert [e["event_id"] for e in first[1:]] == ["f-1:aaaa:1", "f-1:aaaa:2"]
    assert {e["event_id"] for e in first[1:]}.isdisjoint(e["event_id"] for e in again[1:])


def test_an_ordinary_request_is_recorded_as_before() -> None:
    events = recorded(request_id="r-9")
    assert [e["event_id"] for e in events] == ["r-9:0", "r-9:1", "r-9:2"]
    assert "parent_request_id" not in events[0] and "reflection_round" not in events[0]


def test_at_least_one_attempt() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ReflectionWorker("127.0.0.1:9", lambda r, run: None, agents=None, attempts=0)


def test_a_teams_worker_joins_a_group_only_its_principal_may_join() -> None:
    """`tracejudge acls --team payments` lets User:tracejudge-agent-payments join the groups
    under tracejudge-reflections.payments. and nothing else: the worker's default group is one."""
    from tracejudge.streams.kafka.acls import team_group_prefix

    made = [
        ReflectionWorker("127.0.0.1:9", lambda r, run: None, agents=agents, team=team)
        for agents, team in ((["refunds", "billing"], "payments"), (None, None))
    ]
    try:
        assert made[0].group == "tracejudge-reflections.payments.billing+refunds"
        assert made[0].group.startswith(team_group_prefix("payments"))
        assert made[1].group == "tracejudge-reflections-all"  # the shared agent role's
    finally:
        for worker in made:
            worker.close()
    with pytest.raises(ValueError, match="--team"):
        team_group_prefix("pay.ments")  # would read as team "pay"'s prefix
