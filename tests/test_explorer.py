"""The verdict explorer's parts without a broker: verdicts made by the real rule judge from
events, held, filtered, located on their steps, plotted and served (pages, escaping, access)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tracejudge.judges.making import Closing, Judging, make_verdict
from tracejudge.judges.records import step_record
from tracejudge.judges.verdicts import Policy
from tracejudge.models.errors import ConfigurationError
from tracejudge.models.events import parse_event
from tracejudge.streams.cli import exits
from tracejudge.streams.cli.main import main
from tracejudge.streams.settings import Settings
from tracejudge.streams.show import render
from tracejudge.streams.ui.locate import locate
from tracejudge.streams.ui.plots import plot
from tracejudge.streams.ui.server import check_exposure, make_app
from tracejudge.streams.ui.store import Filters, VerdictStore
from tracejudge.streams.ui.trends import buckets, changes

JUDGING = Judging(tool_call_budget=12, policy=Policy(), version="test", llm=None, timelines="all")


def judged(
    rid: str, *, fail: bool, version: str | None = None, ts: float = 1e9, goal: str = "refund"
) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """(evaluation, timeline, alerts) as the worker makes them from a request's events."""
    common: dict[str, Any] = {"request_id": rid, "agent_name": "support", "ts": ts}
    if version:
        common["agent_version"] = version
    events = [
        {**common, "type": "task_started", "goal": f"{goal} order 7 for jane@example.com"},
        {**common, "type": "tool_call", "step_index": 1, "tool": "get_order", "success": True,
         "result_preview": "order 7, paid by jane@example.com"},
        {**common, "type": "tool_call", "step_index": 2, "tool": "refund", "success": not fail,
         **({"error": "payment gateway timeout"} if fail else {"result_preview": "refunded"})},
        {**common, "type": "final_response", "step_index": 3,
         "output": "I could not refund order 7." if fail else "Refunded order 7: 20 EUR."},
    ]  # fmt: skip
    records = [step_record(parse_event(e), beyond_limit=False) for e in events]
    made = make_verdict(JUDGING, Closing(rid, "final_response", records, 4, 0, [], ts, None))
    assert made.evaluation is not None and made.timeline is not None
    return json.loads(made.evaluation), json.loads(made.timeline), len(made.alerts)


def test_a_failed_step_and_its_finding_are_marked_on_the_step_they_concern() -> None:
    evaluation, timeline, _ = judged("r1", fail=True)
    marks = locate(evaluation, timeline)
    refund = next(i for i, e in enumerate(timeline) if e.get("tool") == "refund")
    assert any(m.startswith("failed step") for m in marks.by_entry[refund])
    assert "unrecovered_failure" in marks.by_entry[refund]
    assert 0 not in marks.by_entry  # the task itself concerns no finding
    assert "jane@example.com" not in json.dumps([evaluation, timeline])  # masked when made

    shown = render(evaluation, timeline).splitlines()  # `tracejudge show` marks the same steps
    [refund_row] = [row for row in shown if "refund" in row and "FAILED" in row]
    assert refund_row.endswith("← failed step: payment gateway timeout; unrecovered_failure")

    passed, passed_timeline, _ = judged("r2", fail=False)
    assert locate(passed, passed_timeline).by_entry == {}


def test_the_store_keeps_the_newest_and_counts_what_came_early() -> None:
    store = VerdictStore(capacity=3)
    store.add_output("alerts", "r0", "a0")  # the alert read before its evaluation
    for i in range(5):
        store.add_evaluation(judged(f"r{i}", fail=i % 2 == 0, ts=1e9 + i)[0])
    assert len(store) == 3 and store.get("r0") is None and store.get("r4") is not None
    store.add_output("alerts", "r4", "a4")
    store.add_output("alerts", "r4", "a4")  # the same alert read again counts once
    store.add_evaluation(dict(store.get("r4").evaluation))  # type: ignore[union-attr]
    assert store.get("r4").alerts == 1  # type: ignore[union-attr]  # a redelivery keeps it
    assert [v.request_id for v in store.newest()] == ["r4", "r3", "r2"]
    failed = [v.request_id for v in store.newest(Filters(passed="no"))]
    assert failed == ["r4", "r2"]
    assert [v.request_id for v in store.newest(Filters(since_ts=1e9 + 3))] == ["r4", "r3"]
    store.add_evaluation({"request_id": "x"})  # no score: not an evaluation
    assert store.get("x") is None


def test_a_version_change_is_found_with_the_figures_before_and_after() -> None:
    store = VerdictStore(capacity=100)
    for i in range(12):  # v1 fails every request, v2 none
        evaluation, _, alerts = judged(f"v{i}", fail=i < 6, version="v1" if i < 6 else "v2",
                                       ts=1e9 + 60 * i)  # fmt: skip
        store.add_evaluation(evaluation)
        for a in range(alerts):
            store.add_output("alerts", f"v{i}", f"alert-{a}")
    verdicts = store.of_agent("support")
    found = changes(verdicts)
    assert [(c.before_version, c.after_version) for c in found] == [("v1", "v2")]
    change = found[0]
    assert change.ts == 1e9 + 360
    assert change.before.count == change.after.count == 6
    assert change.before.pass_rate == 0.0 and change.after.pass_rate == 1.0
    assert change.after.mean_score > change.before.mean_score
    assert change.before.alert_rate > change.after.alert_rate == 0.0
    # a canary: both versions side by side for a while; the flips between them are no changes
    store.add_evaluation(judged("late-v1", fail=True, version="v1", ts=1e9 + 60 * 12)[0])
    assert len(changes(store.of_agent("support"))) == 1
    assert changes(store.of_agent("support"))[0].before.count == 7
    drawn = plot(buckets(verdicts), found)
    assert drawn.startswith("<svg") and drawn.count("<polyline") == 3
    assert 'class="version-change"' in drawn and ">v2</text>" in drawn


def settings(**given: Any) -> Settings:
    return Settings.model_validate({"redis_url": "", **given})


async def client_for(store: VerdictStore, **given: Any) -> TestClient[Any, Any]:
    client = TestClient(TestServer(make_app(settings(**given), store)))
    await client.start_server()
    return client


async def test_pages_show_verdicts_and_escape_what_the_agent_wrote() -> None:
    store = VerdictStore(capacity=100)
    evil = "<script>alert(1)</script>"
    evaluation, _, _ = judged("r/1", fail=True, goal=evil)
    evaluation["summary"] = f"{evil} {evaluation['summary']}"
    # as if another producer wrote it unmasked: the explorer masks again before showing
    evaluation["findings"].append({"rule": "foreign", "evidence": "mail bob.smith@example.org"})
    evaluation["summary"] += " (call +44 20 7946 0958)"
    store.add_evaluation(evaluation)
    store.add_evaluation(judged("r2", fail=False, ts=1e9 + 1)[0])
    client = await client_for(store)
    try:
        page = await (await client.get("/")).text()
        assert page.count('class="verdict"') == 2 and evil not in page
        assert "&lt;script&gt;" in page
        found = await (await client.get("/?request=r%2F")).text()
        assert found.count('class="verdict"') == 1
        assert 'http-equiv="refresh"' not in page
        assert 'http-equiv="refresh"' in await (await client.get("/?refresh=1")).text()
        only_failed = await (await client.get("/?passed=no")).text()
        assert only_failed.count('class="verdict"') == 1 and "r/1" in only_failed
        response = await client.get("/requests/r/1")
        assert response.status == 200
        assert "script-src" not in response.headers["Content-Security-Policy"]  # none allowed
        request_page = await response.text()
        assert "unrecovered_failure" in request_page and evil not in request_page
        assert "bob.smith@example.org" not in request_page and "[REDACTED:email]" in request_page
        assert "7946 0958" not in page and "7946 0958" not in request_page
        assert 'id="no-timeline"' in request_page  # no Redis here: said so
    finally:
        await client.close()
    # a Redis that does not answer: the page still shows the verdict the topic gave
    client = await client_for(store, redis_url="redis://127.0.0.1:9/0")
    try:
        response = await client.get("/requests/r/1")
        assert response.status == 200 and "unrecovered_failure" in await response.text()
        assert (await client.get("/requests/nothing")).status == 404
        agent_page = await (await client.get("/agents/support")).text()
        assert "<svg" in agent_page and "No version change seen" in agent_page
    finally:
        await client.close()


async def test_a_token_guards_every_page_but_health() -> None:
    with pytest.raises(ConfigurationError, match="TRACEJUDGE_UI_TOKEN"):
        check_exposure(settings(ui_host="0.0.0.0"))
    check_exposure(settings(ui_host="0.0.0.0", ui_token="s3cret"))
    check_exposure(settings(ui_host="::1"))
    check_exposure(settings(ui_host="0.0.0.0", ui_open=True))  # compose: loopback-only port
    client = await client_for(VerdictStore(capacity=100), ui_token="s3cret")
    try:
        assert (await client.get("/")).status == 401
        assert (await client.get("/", headers={"Authorization": "Bearer wrong"})).status == 401
        assert (await client.get("/health")).status == 200
        ok = await client.get("/", headers={"Authorization": "Bearer s3cret"})
        assert ok.status == 200
        once = await client.get("/agents?token=s3cret", allow_redirects=False)
        assert once.status == 303 and "token" not in once.headers["Location"]
        assert (await client.get("/agents")).status == 200  # the cookie it set
    finally:
        await client.close()


def test_ui_refuses_an_open_address_without_a_token_before_connecting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRACEJUDGE_KAFKA_BOOTSTRAP", "127.0.0.1:9")  # nothing listens there
    assert main(["ui", "--host", "0.0.0.0"]) == exits.USAGE_OR_CONFIGURATION
    assert "TRACEJUDGE_UI_TOKEN" in capsys.readouterr().err
    assert main(["ui", "--port", "8091"]) == exits.UNREACHABLE  # loopback: on to the broker
