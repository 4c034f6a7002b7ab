"""Health answers and bounded logs, without a broker."""

from __future__ import annotations

import asyncio
import logging

from tests.memory import memory_worker
from tracejudge.settings import Settings
from tracejudge.streams.judge.consumer import JudgeRunner
from tracejudge.streams.kafka.brokers import BrokerCount
from tracejudge.streams.shared.logs import RepeatFilter
from tracejudge.streams.worker.health import health_report
from tracejudge.streams.worker.watchdog import StallWatchdog


def test_health_is_ok_only_when_assigned_recovered_and_the_broker_answers() -> None:
    w = memory_worker()
    body, code = health_report(w.ctx, recovered=True, rebalancing=False, stalled=False)
    assert (code, body["status"]) == (503, "starting")  # not assigned yet
    w.ctx.liveness.assigned = True
    body, code = health_report(w.ctx, recovered=True, rebalancing=False, stalled=False)
    assert (code, body["status"], body["broker"]) == (200, "ok", "ok")
    body, code = health_report(
        w.ctx, recovered=True, rebalancing=False, stalled=False, broker_unreachable=True
    )
    assert (code, body["status"], body["broker"]) == (503, "broker_unreachable", "unreachable")
    body, code = health_report(w.ctx, recovered=True, rebalancing=False, stalled=True)
    assert (code, body["status"]) == (503, "stalled")
    body, code = health_report(w.ctx, recovered=False, rebalancing=False, stalled=False)
    assert (code, body["status"]) == (503, "starting")


def test_a_judging_worker_is_ready_only_once_its_judge_consumer_is_assigned() -> None:
    w = memory_worker()
    w.ctx.liveness.assigned = True
    runner = JudgeRunner(Settings(), "judge-requests", lambda record: asyncio.sleep(0))
    body, code = health_report(
        w.ctx, recovered=True, rebalancing=False, stalled=False, judge=runner
    )
    assert (code, body["status"], body["waiting_for"]) == (
        503,
        "starting",
        ["judge consumer assigned"],
    )
    assert body["judge"] == {"assigned": False, "queue_lag": 0, "oldest_job_age_s": 0.0}
    runner.assigned = True
    body, code = health_report(
        w.ctx, recovered=True, rebalancing=False, stalled=False, judge=runner
    )
    assert (code, body["status"], body["judge"]["assigned"]) == (200, "ok", True)
    assert "waiting_for" not in body


def record(msg: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("aiokafka.consumer", level, __file__, 1, msg, None, None)


def test_a_repeated_library_error_is_let_through_once_per_period_with_a_count() -> None:
    now = [0.0]
    repeat = RepeatFilter(period_s=10, clock=lambda: now[0])
    passed = []
    for i in range(1000):
        now[0] = i * 0.03  # 30 s of an error every 30 ms
        r = record("Failed fetch offsets from %s")
        if repeat.filter(r):
            passed.append(r)
    assert len(passed) == 3
    assert "suppressed" in str(passed[1].msg) and "333" in str(passed[1].msg)
    assert repeat.filter(record("another message"))
    assert all(repeat.filter(record("chatty", logging.INFO)) for _ in range(5))


def test_one_broker_of_three_down_is_degraded_not_unhealthy() -> None:
    # with two of three brokers answering, /health once said 503 broker_unreachable
    w = memory_worker()
    w.ctx.liveness.assigned = True
    body, code = health_report(
        w.ctx, recovered=True, rebalancing=False, stalled=False, brokers=BrokerCount(2, 3)
    )
    assert (code, body["status"], body["broker"]) == (200, "ok", "degraded")
    assert body["brokers"] == {"answering": 2, "known": 3}
    body, code = health_report(
        w.ctx, recovered=True, rebalancing=False, stalled=False, brokers=BrokerCount(3, 3)
    )
    assert (code, body["broker"]) == (200, "ok")


def test_a_failing_probe_is_unreachable_only_when_no_broker_answers() -> None:
    now = [0.0]
    dog = StallWatchdog(Settings(), [], set, lambda: 0.0, clock=lambda: now[0])
    dog._broker_failed(0.0, OSError("leader gone"), lambda reason: None)
    now[0] = 30.0
    dog.census.last = BrokerCount(2, 3)
    assert not dog.broker_unreachable()
    dog.census.last = BrokerCount(0, 3)
    assert dog.broker_unreachable()
