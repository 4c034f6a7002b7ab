"""Session verdicts on the real broker and Redis, seen in Chromium: a session with an explicit
end is final within a second of its `session_end`; one without is final after the idle time;
a session resumed after its final verdict gets a new revision and keeps the old ones, on the
sessions topic, in Redis and on the explorer's session page."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiokafka.structs import ConsumerRecord
from selenium.webdriver.common.by import By

from tests.integration.browser import browser, explorer, screenshot, wait_until
from tests.integration.harness import WorkerProcess, consume, tracer_for, worker_env
from tracejudge.client import Tracer
from tracejudge.models import names
from tracejudge.models.ids import stable_id
from tracejudge.models.sessions import session_id

pytestmark = pytest.mark.integration

AGENT = "chat-support"
IDLE_S = 4.0


@pytest.fixture(scope="module")
def session_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    workdir = tmp_path_factory.mktemp("session-worker")
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        workdir,
        "sessions",
        idle_timeout_s=2,
        session_idle_s=IDLE_S,
        idle_check_interval_s=0.5,
    )
    worker = WorkerProcess(env, workdir / "worker.log").start()
    yield worker
    worker.stop()


def chat_turn(tracer: Tracer, session: str, asked: str, ok: bool = True, end: bool = False) -> str:
    """One user turn as a request of the session; `end`: the session ends with it."""
    with tracer.traced(asked, agent_name=AGENT, session_key=session) as req:
        req.tool_call("get_booking", args={"id": "AB12"}, success=True, result="found")
        if ok:
            req.tool_call("change_flight", args={"id": "AB12"}, success=True, result="changed")
            req.final("Done: your flight is changed to Friday.")
        else:
            req.tool_call("change_flight", args={"id": "AB12"}, success=False, error="HTTP 503")
            req.final("Sorry, I could not change it.")
    if end:
        assert req.end_session(reason="the user closed the chat")
    assert tracer.flush(10)
    return req.request_id


def revisions_of(worker: WorkerProcess, session: str, count: int) -> list[ConsumerRecord]:
    """The session's verdict records on the sessions topic, once there are `count`."""
    found = _revisions(worker, session, lambda mine: len(mine) >= count)
    assert len(found) >= count, (found, worker.tail())
    return found


def revisions_until(
    worker: WorkerProcess, session: str, done: Callable[[dict[str, Any]], bool]
) -> list[ConsumerRecord]:
    """The session's verdict records on the sessions topic, once one of them is `done`."""

    def any_done(mine: list[ConsumerRecord]) -> bool:
        return any(done(json.loads(r.value)) for r in mine)

    found = _revisions(worker, session, any_done, settle_s=0.5)
    assert any_done(found), (found, worker.tail())
    return found


def _revisions(
    worker: WorkerProcess,
    session: str,
    enough: Callable[[list[ConsumerRecord]], bool],
    settle_s: float = 0.0,
) -> list[ConsumerRecord]:
    """The session's records on the sessions topic, read until they are `enough`."""

    def mine(records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        return [r for r in records if json.loads(r.value)["session_key"] == session]

    records = asyncio.run(
        consume(
            worker.settings.kafka_bootstrap,
            worker.topic(names.SESSIONS),
            until=lambda records: enough(mine(records)),
            timeout_s=90,
            settle_s=settle_s,
        )
    )
    return mine(records)


def end_event_time(worker: WorkerProcess, session: str) -> float:
    """When the session_end reached the broker (its record's timestamp), in seconds."""
    records = asyncio.run(
        consume(
            worker.settings.kafka_bootstrap,
            worker.topic(names.EVENTS),
            until=lambda rs: any(
                b"session_end" in r.value and session.encode() in r.value for r in rs
            ),
            timeout_s=30,
        )
    )
    (end,) = [r for r in records if b"session_end" in r.value and session.encode() in r.value]
    return float(end.timestamp) / 1000


def test_ended_idle_and_resumed_sessions_on_the_topic_in_redis_and_the_explorer(
    session_worker: WorkerProcess, tmp_path: Path
) -> None:
    ended, quiet = f"ended-{uuid.uuid4().hex[:6]}", f"quiet-{uuid.uuid4().hex[:6]}"
    with tracer_for(session_worker) as tracer:
        chat_turn(tracer, ended, "Change my flight AB12 to Friday.", ok=False)
        chat_turn(tracer, ended, "Please try again: flight AB12 to Friday.", end=True)
        last_quiet = chat_turn(tracer, quiet, "Change my flight AB12 to Friday.")
    quiet_at = time.time()

    # explicit end: final within a second of the session_end. Each turn was closed on its
    # request's partition: the first may reach the session agent after the end (a late turn,
    # which revises the final verdict and keeps it final), so the turns' order varies
    both = revisions_until(session_worker, ended, lambda v: v["final"] and len(v["turns"]) == 2)
    verdicts = [json.loads(r.value) for r in both]
    first_final = next(r for r, v in zip(both, verdicts, strict=True) if v["final"])
    took = first_final.timestamp / 1000 - end_event_time(session_worker, ended)
    print(f"\nfinal {took * 1000:.0f} ms after the session_end")
    assert took < 1.0, f"final {took:.3f}s after the session_end"
    last = verdicts[-1]
    assert (last["cause"], last["final"]) == ("ended", True)
    assert [v["revision"] for v in verdicts] == list(range(1, len(verdicts) + 1))
    assert last["success"]  # the retry in the second turn made the first turn's failure good
    assert not any(v["cause"] in ("resumed", "idle") for v in verdicts)

    # no end: final after the idle time, not before
    idle = revisions_of(session_worker, quiet, 2)
    went_final = json.loads(idle[-1].value)
    assert (went_final["cause"], went_final["final"]) == ("idle", True)
    assert idle[-1].timestamp / 1000 - quiet_at >= IDLE_S - 0.5

    # resumed after its final verdict: a new revision, the old ones kept
    with tracer_for(session_worker) as tracer:
        again = chat_turn(tracer, quiet, "One more thing: add a bag to AB12.")
    resumed_records = revisions_of(session_worker, quiet, 3)
    history = [json.loads(r.value) for r in resumed_records[:3]]
    assert [(v["revision"], v["cause"]) for v in history] == [
        (1, "turn"), (2, "idle"), (3, "resumed")]  # fmt: skip
    assert history[2]["cause_request_id"] == again and not history[2]["final"]
    assert [t["request_id"] for t in history[2]["turns"]] == [last_quiet, again]

    # in Redis: each revision under its number, never overwritten
    client: Any = redis.Redis.from_url(session_worker.settings.redis_url)
    sid = stable_id("session", session_id(AGENT, quiet))
    keys = [names.REDIS_SESSION_REVISION_KEY.format(session=sid, revision=n) for n in (1, 2, 3)]
    # written once the topic has the revision, as an evaluation is: a moment after
    wait_until(lambda: all(client.exists(k) for k in keys), 10, lambda: str(keys))
    kept = [client.get(k) for k in keys]
    assert [json.loads(k)["cause"] for k in kept] == ["turn", "idle", "resumed"]

    # in the explorer: the session page lists the turns and every revision
    log = tmp_path / "explorer.log"
    with explorer(session_worker.env, log) as base, browser() as page:
        link = f"{base}/session?" + urllib.parse.urlencode({"agent": AGENT, "key": quiet})

        def shown() -> bool:
            page.get(link)
            return len(page.find_elements(By.CSS_SELECTOR, "tr.revision")) >= 3

        wait_until(shown, 60, lambda: page.page_source)
        rows = page.find_elements(By.CSS_SELECTOR, "tr.revision")
        assert [r.get_attribute("data-revision") for r in rows[:3]] == ["1", "2", "3"]
        assert "resumed" in rows[2].text and "idle" in rows[1].text
        turns = page.find_element(By.ID, "turns").text
        assert last_quiet in turns and again in turns
        screenshot(page, "session")
        page.get(f"{base}/sessions")
        listed = page.find_element(By.ID, "sessions").text
        assert quiet in listed and ended in listed
        page.find_element(By.LINK_TEXT, ended).click()
        assert "final" in page.find_element(By.ID, "state").text
