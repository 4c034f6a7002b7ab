"""The verdict explorer's parts without a broker: verdicts made by the real rule judge from
events, held, filtered, located on their steps, plotted and served (pages, escaping, access)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tracejudge.judges.verdict.conclude import Policy
from tracejudge.judges.verdict.make import Closing, Judging, make_verdict
from tracejudge.judges.windows.records import step_record
from tracejudge.models.agents import NO_AGENT
from tracejudge.models.errors import ConfigurationError
from tracejudge.models.events import parse_event
from tracejudge.models.outputs import JudgeCall
from tracejudge.settings import Settings
from tracejudge.streams.cli import exits
from tracejudge.streams.cli.main import main
from tracejudge.streams.explorer.locate import locate
from tracejudge.streams.explorer.plots import plot
from tracejudge.streams.explorer.server import check_exposure, make_app
from tracejudge.streams.explorer.show import render
from tracejudge.streams.explorer.store import Filters, Verdict, VerdictStore
from tracejudge.streams.explorer.trends import bins, changes, figures, t975, wilson

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
    assert marks.blamed == refund and "blamed" in marks.by_entry[refund]
    assert "jane@example.com" not in json.dumps([evaluation, timeline])  # masked when made

    shown = render(evaluation, timeline).splitlines()  # `tracejudge show` marks the same steps
    [refund_row] = [row for row in shown if "refund" in row and "FAILED" in row]
    assert refund_row.endswith(
        "← blamed; failed step: payment gateway timeout; unrecovered_failure"
    )
    assert any(
        line.startswith("blame: step 2 by support (rules, confidence 0.60): refund failed")
        for line in shown
    )

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
    # 12 verdicts are too few for a trend: said, not drawn (the marker: see the binning test)
    assert "Too few to show a trend" in plot(bins(verdicts), found)


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
        assert 'id="blame"' in request_page and 'id="remaining"' in request_page
    finally:
        await client.close()
    # a Redis that does not answer: the page still shows the verdict the topic gave
    client = await client_for(store, redis_url="redis://127.0.0.1:9/0")
    try:
        response = await client.get("/requests/r/1")
        assert response.status == 200 and "unrecovered_failure" in await response.text()
        assert (await client.get("/requests/nothing")).status == 404
        agent_page = await (await client.get("/agents/support")).text()
        assert "Too few to show a trend" in agent_page and "No version change seen" in agent_page
        assert 'id="no-interventions"' in agent_page
    finally:
        await client.close()


async def test_a_token_guards_every_page_but_health() -> None:
    with pytest.raises(ConfigurationError, match="TRACEJUDGE_UI_TOKEN"):
        check_exposure(settings(ui_host="0.0.0.0"))
    check_exposure(settings(ui_host="0.0.0.0", ui_token="s3cret-long-token-0123"))
    check_exposure(settings(ui_host="::1"))
    check_exposure(settings(ui_host="0.0.0.0", ui_open=True))  # compose: loopback-only port
    client = await client_for(VerdictStore(capacity=100), ui_token="s3cret-long-token-0123")
    try:
        assert (await client.get("/")).status == 401
        assert (await client.get("/", headers={"Authorization": "Bearer wrong"})).status == 401
        assert (await client.get("/health")).status == 200
        ok = await client.get("/", headers={"Authorization": "Bearer s3cret-long-token-0123"})
        assert ok.status == 200
        once = await client.get("/agents?token=s3cret-long-token-0123", allow_redirects=False)
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


def plain(
    rid: str, ts: float, *, score: int = 80, agent: str = "support", **more: Any
) -> dict[str, Any]:
    """An evaluation with only what the list, the filters and the figures read (the rule
    judge's own output is covered above; hundreds of them here would only be slower)."""
    return {"request_id": rid, "agent_name": agent, "ts": ts, "overall_score": score,
            "passed": score >= 60, "success": True, **more}  # fmt: skip


async def test_the_list_pages_through_every_verdict_keeping_its_filters() -> None:
    store = VerdictStore(capacity=1000)
    for i in range(450):  # every other one failed: 225 match passed=no
        store.add_evaluation(plain(f"r{i:03}", 1e9 + i, score=40 if i % 2 else 90))
    client = await client_for(store)
    try:
        first = await (await client.get("/")).text()
        assert first.count('class="verdict"') == 100 and 'data-request="r449"' in first
        assert "showing 1–100 of 450" in first and 'rel="prev"' not in first
        assert 'href="/?page=2" rel="next"' in first and "page 1 of 5" in first
        second = await (await client.get("/?page=2")).text()
        assert "showing 101–200 of 450" in second and 'data-request="r349"' in second
        assert 'href="/?page=1" rel="prev"' in second and 'href="/?page=3" rel="next"' in second
        last = await (await client.get("/?page=5")).text()
        assert last.count('class="verdict"') == 50 and 'data-request="r000"' in last
        assert "showing 401–450 of 450" in last and 'rel="next"' not in last
        # the filters go along with the page links
        failed = await (await client.get("/?passed=no&agent=&page=3")).text()
        assert "showing 201–225 of 225" in failed and failed.count('class="verdict"') == 25
        assert 'href="/?passed=no&amp;page=2" rel="prev"' in failed
        beyond = await (await client.get("/?page=9")).text()  # past the end: the last page
        assert "showing 401–450 of 450" in beyond
        bad = await client.get("/?page=two")
        assert bad.status == 400 and "page" in await bad.text()
    finally:
        await client.close()


def test_over_time_is_binned_by_round_widths_with_each_bins_count() -> None:
    store = VerdictStore(capacity=1000)
    start = 1_700_000_040.0  # a whole minute
    for i in range(90):  # one verdict every 20 s for 30 minutes: 1-minute bins of 3
        store.add_evaluation(plain(f"r{i}", start + 20 * i, score=50 + i % 3, agent_version="v1"))
    binned = bins(store.of_agent("support"))
    assert binned.width == 60 and binned.trend
    assert len(binned.bins) == 30 and {b.count for b in binned.bins} == {3}
    assert all(b.start % 60 == 0 and b.end - b.start == 60 for b in binned.bins)
    assert binned.bins[0].mean_score == 51
    for i in range(45, 90):  # a new version from the 16th minute on
        store.add_evaluation(plain(f"r{i}", start + 20 * i, score=50 + i % 3, agent_version="v2"))
    drawn = plot(bins(store.of_agent("support")), changes(store.of_agent("support")))
    assert drawn.startswith("<svg") and drawn.count("<polyline") == 3
    assert drawn.count('class="count"') == 30 and "<title>3 verdicts" in drawn
    assert 'class="version-change"' in drawn and ">v2</text>" in drawn
    # a day of them: hours
    day = [plain(f"d{i}", start + 600 * i) for i in range(144)]
    store = VerdictStore(capacity=1000)
    for e in day:
        store.add_evaluation(e)
    assert bins(store.of_agent("support")).width == 3600


def test_a_few_verdicts_or_a_few_seconds_of_them_are_no_trend() -> None:
    store = VerdictStore(capacity=1000)
    for i in range(200):  # a replay: 200 verdicts within 3 s
        store.add_evaluation(plain(f"r{i}", 1e9 + i * 0.015))
    burst = bins(store.of_agent("support"))
    assert not burst.trend and "1 minute" in burst.why
    drawn = plot(burst, [])
    assert "<polyline" not in drawn and "Too few to show a trend" in drawn
    assert "200 verdicts" in drawn
    store = VerdictStore(capacity=1000)
    for i in range(4):  # four verdicts an hour apart
        store.add_evaluation(plain(f"r{i}", 1e9 + 3600 * i))
    few = bins(store.of_agent("support"))
    assert not few.trend and "4 verdicts" in few.why
    assert "<polyline" not in plot(few, [])


def test_intervals_are_honest_on_few_verdicts() -> None:
    four = [Verdict.of(plain(f"r{i}", 1e9 + i, score=70 + 2 * i), b"{}") for i in range(4)]
    f = figures(four)
    # t with 3 degrees of freedom (3.182), not the normal's 1.96: sd 2.58 / sqrt(4) * 3.182
    assert f.score_ci95 == pytest.approx(4.108, abs=0.01)
    assert f.pass_ci == pytest.approx((0.510, 1.0), abs=0.01)  # Wilson: 4 of 4 is not 100 %
    assert figures(four[:1]).score_ci95 is None  # one verdict: no interval at all
    same = [Verdict.of(plain(f"s{i}", 1e9 + i, score=75), b"{}") for i in range(4)]
    assert figures(same).score_ci95 is None  # four equal scores say little of the spread
    many = [Verdict.of(plain(f"m{i}", 1e9 + i, score=80 + i % 2), b"{}") for i in range(400)]
    assert 0 < figures(many).score_ci95 < 0.1  # type: ignore[operator]
    assert t975(1) == pytest.approx(12.706, abs=1e-3)
    assert t975(40) == pytest.approx(2.021, abs=1e-3) and t975(120) == pytest.approx(
        1.980, abs=1e-3
    )
    assert wilson(0, 0) is None and wilson(0, 10)[0] == 0.0  # type: ignore[index]


async def test_intervals_on_the_agent_page_never_read_zero_on_differing_scores() -> None:
    store = VerdictStore(capacity=1000)
    for i, score in enumerate((70, 72, 74, 76)):
        store.add_evaluation(plain(f"r{i}", 1e9 + i, score=score))
    for i in range(400):
        store.add_evaluation(plain(f"m{i}", 1e9 + i, score=80 + i % 2, agent="busy"))
    store.add_evaluation(plain("one", 1e9, agent="lonely"))
    client = await client_for(store)
    try:
        page = await (await client.get("/agents/support")).text()
        assert "± 4.1" in page and "± 0.0" not in page
        assert "± &lt;0.1" in await (await client.get("/agents/busy")).text()
        lonely = await (await client.get("/agents/lonely")).text()
        assert "±" not in lonely and "n too small" in lonely
    finally:
        await client.close()


async def test_verdicts_without_an_agent_name_are_grouped_under_a_label_that_links() -> None:
    store = VerdictStore(capacity=100)
    store.add_evaluation({**judged("anon-1", fail=True)[0], "agent_name": ""})
    store.add_evaluation({**plain("anon-2", 1e9 + 1), "agent_name": None})
    store.add_evaluation(plain("named", 1e9 + 2, agent="support"))
    assert store.agents() == [NO_AGENT, "support"] and NO_AGENT == "(no agent name)"
    client = await client_for(store)
    try:
        agents = await (await client.get("/agents")).text()
        assert '<a href="/agents/%28no%20agent%20name%29">(no agent name)</a>' in agents
        assert ">-<" not in agents
        page = await client.get("/agents/%28no%20agent%20name%29")
        assert page.status == 200 and "anon-1" in await page.text()
        listed = await (await client.get("/?agent=%28no+agent+name%29")).text()
        assert listed.count('class="verdict"') == 2 and "named" not in listed
        request = await (await client.get("/requests/anon-1")).text()
        assert 'href="/agents/%28no%20agent%20name%29"' in request
    finally:
        await client.close()


async def test_a_missing_timeline_is_explained_by_the_one_reason_the_facts_give() -> None:
    from tracejudge.streams.explorer.show import Kept, no_timeline

    failed, _, _ = judged("why-1", fail=True, ts=1e9)
    passed, _, _ = judged("why-2", fail=False, ts=1e9)
    flagged_only = Judging(12, Policy(), "test", None, timelines="flagged")
    from tracejudge.streams.demo.samples import sample_traces

    booked = sample_traces("why")[0]  # passed, succeeded, complete
    records = [step_record(parse_event(e), beyond_limit=False) for e in booked.events]
    made = make_verdict(
        flagged_only, Closing(booked.request_id, "final_response", records, 5, 0, [], 1e9, None)
    )
    assert made.evaluation is not None and made.timeline is None
    not_flagged = json.loads(made.evaluation)
    assert (failed["timeline"], not_flagged["timeline"]) == ("kept", "not_flagged")
    s = settings(redis_url="redis://127.0.0.1:9/0", evaluation_ttl_s=3600)
    up, now = Kept(redis="up"), 1e9 + 60
    reasons = {
        "passed": no_timeline(not_flagged, up, s, now),
        "off": no_timeline({**failed, "timeline": "off"}, up, s, now),
        "no redis at the worker": no_timeline({**failed, "timeline": "no_redis"}, up, s, now),
        "no redis here": no_timeline(failed, Kept(redis="off"), s, now),
        "redis down": no_timeline(failed, Kept(redis="down"), s, now),
        "expired": no_timeline(failed, up, s, 1e9 + 7200),
        "elsewhere": no_timeline(failed, up, s, now),
    }
    assert reasons["passed"].startswith("not kept: the request passed")
    assert reasons["off"] == "not kept: the worker that judged it has TRACEJUDGE_TIMELINES=off"
    assert "had no Redis" in reasons["no redis at the worker"]
    assert "TRACEJUDGE_REDIS_URL is empty here" in reasons["no redis here"]
    assert "does not answer" in reasons["redis down"]
    assert reasons["expired"].startswith("expired: judged 2.0 hours ago")
    assert "another one" in reasons["elsewhere"]
    assert len(set(reasons.values())) == len(reasons)  # one reason each, never the list
    for reason in reasons.values():  # each names one cause only
        causes = ("TIMELINES=off", "TTL_S", "REDIS_URL is empty", "does not answer", "passed")
        assert sum(cause in reason for cause in causes) <= 1, reason
    # the request page says the same: a passed request of a flagged-only worker, no Redis here
    store = VerdictStore(capacity=10)
    store.add_evaluation(not_flagged)
    store.add_evaluation(passed)
    client = await client_for(store)
    try:
        page = await (await client.get("/requests/why:booked")).text()
        assert 'id="no-timeline"' in page and "the request passed, succeeded" in page
        assert "TRACEJUDGE_EVALUATION_TTL_S" not in page
        kept_page = await (await client.get("/requests/why-2")).text()
        assert "TRACEJUDGE_REDIS_URL is empty here" in kept_page
    finally:
        await client.close()


def with_judge(rid: str, **call: Any) -> dict[str, Any]:
    """A failed request's evaluation as the LLM judge stage completes it: the `judge` block
    as the worker dumps it (validated by the model, so the test follows the schema)."""
    evaluation, _, _ = judged(rid, fail=True)
    given = {"requested_model": "gpt-4o-mini", "prompt_version": "a3f9c2e81b04", **call}
    judge = JudgeCall.model_validate(given).model_dump(mode="json")
    return {**evaluation, "judge_status": "ok", "judge": judge}


CALLED = {
    "returned_model": "gpt-4o-mini-2024-07-18",
    "cached": False,
    "attempts": 2,
    "latency_s": 1.4213,
    "input_tokens": 1234,
    "cached_input_tokens": 200,
    "output_tokens": 96,
    "cost_usd": 0.00041,
    "steps_omitted": 12,
    "input_halved": True,
}


def test_show_prints_the_judge_call_after_the_judge_status_and_nothing_without_one() -> None:
    shown = render(with_judge("j1", **CALLED), []).splitlines()
    status = next(i for i, row in enumerate(shown) if row.endswith("judge ok"))
    assert shown[status + 1 : status + 3] == [
        "judge: gpt-4o-mini → gpt-4o-mini-2024-07-18, prompt a3f9c2e81b04, 2 attempts, 1.42 s, "
        "1,234 in (200 cached) / 96 out tokens, $0.0004",
        "  12 steps left out of the prompt; input sent at half size (the server said the "
        "context was exceeded)",
    ]
    # from the verdict cache: no call, so no attempts, tokens or cost to show
    cached = render(with_judge("j2", cached=True, attempts=0), []).splitlines()
    assert "judge: gpt-4o-mini, prompt a3f9c2e81b04, from the verdict cache (no call)" in cached
    # one attempt, the model answering as asked, a server that reported no usage, nothing cut
    once = {"returned_model": "gpt-4o-mini", "cached": False, "attempts": 1, "latency_s": 0.5}
    plain = render(with_judge("j3", **once), []).splitlines()
    line = "judge: gpt-4o-mini, prompt a3f9c2e81b04, 1 attempt, 0.50 s, no token usage reported"
    assert plain[status + 1] == line and plain[status + 2].startswith("summary:")
    rules_only, _, _ = judged("j4", fail=True)  # judge_status disabled: no block, no line
    assert "judge" not in rules_only or rules_only["judge"] is None
    assert not [row for row in render(rules_only, []).splitlines() if row.startswith("judge:")]


async def test_the_request_page_shows_the_judge_call_escaped() -> None:
    store = VerdictStore(capacity=10)
    store.add_evaluation(with_judge("j1", **CALLED))
    # the model name is what the judge's server said: escaped like any other text
    store.add_evaluation(with_judge("j2", returned_model="<b>m</b>", cached=False, attempts=1))
    store.add_evaluation(judged("j3", fail=True)[0])
    client = await client_for(store)
    try:
        page = await (await client.get("/requests/j1")).text()
        assert '<p id="judge-call">' in page
        for figure in (
            "gpt-4o-mini → gpt-4o-mini-2024-07-18",
            "prompt a3f9c2e81b04",
            "2 attempts",
            "1.42 s",
            "1,234 in (200 cached) / 96 out tokens",
            "$0.0004",
            "12 steps left out of the prompt",
            "input sent at half size",
        ):
            assert figure in page, figure
        escaped = await (await client.get("/requests/j2")).text()
        assert "<b>m</b>" not in escaped and "gpt-4o-mini → &lt;b&gt;m&lt;/b&gt;" in escaped
        assert 'id="judge-call"' not in await (await client.get("/requests/j3")).text()
    finally:
        await client.close()


async def test_a_request_page_lists_its_interventions_and_what_stopping_saved() -> None:
    store = VerdictStore(capacity=10)
    evaluation, _, _ = judged("loop-1", fail=True)
    evaluation["interventions"] = [
        {"intervention_id": "i1", "kind": "loop", "crossed": "repeated_call", "action": "stop",
         "at_step": 1, "steps_after": 0, "stopped_after": True},
        {"intervention_id": "i2", "kind": "budget", "crossed": "cost_usd", "action": "stop",
         "at_step": 2, "steps_after": 3, "stopped_after": False},
        {"intervention_id": "i3", "kind": "loop", "crossed": "cycle", "action": "steer",
         "at_step": 4, "steps_after": 0, "stopped_after": True},
        {"intervention_id": "i4", "kind": "loop", "crossed": "cycle", "action": "steer",
         "at_step": 5, "steps_after": 0, "stopped_after": True},
    ]  # fmt: skip
    evaluation["saved"] = {"tool_calls": 12, "tokens": 3400, "cost_usd": 0.25}
    store.add_evaluation(evaluation)
    store.add_evaluation(judged("plain", fail=False, ts=1e9 + 1)[0])
    client = await client_for(store)
    try:
        page = await (await client.get("/requests/loop-1")).text()
        assert page.count('class="intervention"') == 4
        assert "repeated_call" in page and "went on" in page
        assert "no step after it" in page  # a steer the run answered after: not "stopped"
        assert "12 tool calls, 3400 tokens, $0.2500" in page
        plain = await (await client.get("/requests/plain")).text()
        assert 'id="interventions"' not in plain and 'id="saved"' not in plain
        agent_page = await (await client.get("/agents/support")).text()
        budget = '<tr data-kind="budget stop"><td>budget stop</td><td class="num">1</td>'
        assert budget + '<td class="num">0' in agent_page
        loop = '<tr data-kind="loop stop"><td>loop stop</td><td class="num">1</td>'
        assert loop + '<td class="num">1' in agent_page
        # steered twice, one run: "runs told 1", not 2
        steer = '<tr data-kind="loop steer"><td>loop steer</td><td class="num">1</td>'
        assert steer + '<td class="num">1' in agent_page
        assert "1 stopped run, at least" in agent_page and "12 tool calls, 3400 tokens" in (
            agent_page
        )
    finally:
        await client.close()
    shown = render(evaluation, [], "off")
    assert "  loop repeated_call (stop) at step 1: stopped" in shown
    assert "  budget cost_usd (stop) at step 2: went on 3 steps" in shown
    assert "  loop cycle (steer) at step 4: no step after it" in shown
