"""The explorer's web server: aiohttp (already the worker's web server) rendering Jinja2
templates with autoescaping, so every text from a verdict reaches the page as text."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from tracejudge.judges.agreement.tally import Tally
from tracejudge.judges.masking.redact import ID_FIELDS, mask, mask_any
from tracejudge.models.version import PACKAGE_VERSION
from tracejudge.settings import Settings
from tracejudge.streams.agreement.thresholds import rule_json, threshold_of, threshold_words
from tracejudge.streams.explorer.agreement import (
    ActionReader,
    AgreementReader,
    Reading,
    actions_of,
    agreement_of,
    auc_text,
    share_text,
    steers_of,
)
from tracejudge.streams.explorer.chain import chain_of
from tracejudge.streams.explorer.feed import feed
from tracejudge.streams.explorer.interventions import intervention_figures
from tracejudge.streams.explorer.locate import locate
from tracejudge.streams.explorer.modes import mode_rows
from tracejudge.streams.explorer.plots import plot
from tracejudge.streams.explorer.reliability import describe
from tracejudge.streams.explorer.sessions import SessionBook
from tracejudge.streams.explorer.show import judge_call, look_up, no_timeline, score_shown
from tracejudge.streams.explorer.store import QUADRANTS, Filters, VerdictStore, agent_label
from tracejudge.streams.explorer.trends import Figures, bins, changes, figures
from tracejudge.streams.shared.logs import quiet_library_logs
from tracejudge.streams.shared.web_guard import (
    check_token,
    guard_middleware,
    host_names,
    tokens_match,
)

log = logging.getLogger(__name__)

COOKIE = "tracejudge_ui_token"
PAGE_ROWS = 100  # verdicts on one page of the list; ?page=N for the older ones
REFRESH_S = 15  # the verdicts page reloads itself when asked (no script: a meta refresh)
SINCE = {"15m": 900, "1h": 3600, "24h": 86400, "7d": 7 * 86400}
# pages hold no script; nothing from elsewhere, no framing
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

STORE = web.AppKey("store", VerdictStore)
SESSIONS = web.AppKey("sessions", SessionBook)
SESSION_CAPACITY = 10_000  # sessions held, the latest to change
SETTINGS = web.AppKey("settings", Settings)
AGREEMENT = web.AppKey("agreement", AgreementReader)
ACTIONS = web.AppKey("actions", ActionReader)
# the page on sending outcomes; the explorer serves it from the source tree when it has one
OUTCOMES_DOCS = Path(__file__).resolve().parents[2] / "docs" / "outcomes.md"


def check_exposure(settings: Settings) -> None:
    """Verdicts are masked, yet still the agents' business: off loopback only with a token."""
    token = settings.ui_token.get_secret_value()
    if settings.ui_open:  # something else limits who reaches it; a token given is still checked
        check_token("TRACEJUDGE_UI_TOKEN", token, "TRACEJUDGE_UI_HOST", "127.0.0.1")
        return
    check_token("TRACEJUDGE_UI_TOKEN", token, "TRACEJUDGE_UI_HOST", settings.ui_host)


def _token_middleware(token: str) -> Any:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/health":
            return await handler(request)
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        given = given or request.cookies.get(COOKIE, "")
        query = request.query.get("token", "")
        if tokens_match(query, token):
            # kept in a cookie, and the token taken out of the address bar and history; to a
            # path on this origin only (`//evil.example/x` would be another site's address)
            query = urllib.parse.urlencode(
                [(k, v) for k, v in request.query.items() if k != "token"]
            )
            path = "/" + urllib.parse.quote(request.path.lstrip("/\\"))
            response = web.HTTPSeeOther(path + (f"?{query}" if query else ""))
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
            raise response
        if not tokens_match(given, token):
            raise web.HTTPUnauthorized(
                text="tracejudge ui: give the access token (TRACEJUDGE_UI_TOKEN) as "
                "`Authorization: Bearer TOKEN` or once as ?token=TOKEN",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await handler(request)

    return guard


def session_link(agent: str | None, key: str) -> str:
    return "/session?" + urllib.parse.urlencode({"agent": agent or "", "key": key})


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
    )
    env.filters["clock"] = lambda ts: (
        time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) if ts else "?"
    )
    env.filters["pct"] = lambda rate: f"{100 * rate:.0f}%"
    env.filters["mask"] = mask  # the list's summaries, as the request page's texts
    env.filters["score_ci"] = _score_ci
    env.filters["rate_ci"] = _rate_ci
    env.filters["auc"] = auc_text
    env.filters["share"] = share_text
    env.filters["bin"] = describe
    env.globals["agent_label"] = agent_label
    env.globals["session_link"] = session_link
    env.globals["judge_call"] = judge_call  # the figures `tracejudge show` prints
    env.globals["version"] = PACKAGE_VERSION
    return env


def _score_ci(f: Figures) -> str:
    """The mean score's interval as shown: never "± 0.0" (the interval is not zero wide, or
    there is none: one verdict, or every score the same)."""
    if f.score_ci95 is None:
        return "(n too small)" if f.count < 2 else f"(all {f.count} equal)"
    return "± <0.1" if f.score_ci95 < 0.05 else f"± {f.score_ci95:.1f}"


def _rate_ci(interval: tuple[float, float] | None) -> str:
    if interval is None:
        return ""
    low, high = interval
    return f"({100 * low:.0f}–{100 * high:.0f}%)"


TEMPLATES = _environment()


def _page(template: str, refresh: int | None = None, **context: Any) -> web.Response:
    page = TEMPLATES.get_template(template).render(refresh=refresh, **context)
    return web.Response(text=page, content_type="text/html")


async def verdicts_page(request: web.Request) -> web.Response:
    store = request.app[STORE]
    q = request.query
    since = SINCE.get(q.get("since", ""), 0)
    filters = Filters(
        agent=q.get("agent", ""),
        quadrant=q.get("quadrant", ""),
        passed=q.get("passed", ""),
        judge_status=q.get("judge_status", ""),
        since_ts=time.time() - since if since else 0.0,
        request=q.get("request", "").strip(),
        finding=q.get("finding", ""),
        check=q.get("check", ""),
    )
    chosen = list(store.newest(filters))
    page, pages = _page_number(q.get("page", "1")), max(1, math.ceil(len(chosen) / PAGE_ROWS))
    page = min(page, pages)  # past the end (the list shrank since): its last page
    first = (page - 1) * PAGE_ROWS
    # by offset, newest first: verdicts that arrive meanwhile move the older ones down a little,
    # as on any list that grows at the top; the filters go along with every page's link
    kept = [(k, v) for k, v in q.items() if k != "page" and v]

    def link(number: int) -> str:
        return "/?" + urllib.parse.urlencode([*kept, ("page", str(number))])

    return _page(
        "verdicts.html",
        refresh=REFRESH_S if q.get("refresh") else None,
        rows=chosen[first : first + PAGE_ROWS],
        first=first + 1,
        page=page,
        pages=pages,
        newer=link(page - 1) if page > 1 else None,
        older=link(page + 1) if page < pages else None,
        newest=link(1) if page > 2 else None,
        oldest=link(pages) if page < pages - 1 else None,
        matched=len(chosen),
        held=len(store),
        query=q,
        agents=store.agents(),
        quadrants=QUADRANTS,
        statuses=store.judge_statuses(),
        findings=store.findings(),
        checks=store.checks(),
        since_choices=list(SINCE),
    )


def _page_number(given: str) -> int:
    try:
        number = int(given)
    except ValueError:
        number = 0
    if number < 1:
        raise web.HTTPBadRequest(text=f"page={given!r}: give a page number, 1 or more")
    return number


async def request_page(request: web.Request) -> web.Response:
    rid = request.match_info["request_id"]
    held = request.app[STORE].get(rid)
    settings = request.app[SETTINGS]
    in_redis = await look_up(settings, rid)
    found = held.evaluation if held is not None else in_redis.evaluation
    if found is None:
        raise web.HTTPNotFound(text=f"no verdict for request {rid} (yet, or any more)")
    # the worker masked all of it before it was kept; masked again here, in case a record came
    # from elsewhere (another producer, an older version): the page never shows a secret
    evaluation = mask_any(found, ID_FIELDS)
    timeline = mask_any(in_redis.timeline, ID_FIELDS)
    marks = locate(evaluation, timeline)
    return _page(
        "request.html",
        e=evaluation,
        score=score_shown(evaluation),
        verdict=held,
        chain=chain_of(evaluation, request.app[STORE]),
        timeline=timeline,
        marks=marks,
        no_timeline=None if timeline else no_timeline(found, in_redis, settings),
    )


async def agents_page(request: web.Request) -> web.Response:
    store = request.app[STORE]
    rows = [(name, figures(verdicts)) for name, verdicts in store.by_agent().items()]
    return _page("agents.html", rows=rows)


async def agent_page(request: web.Request) -> web.Response:
    name = request.match_info["agent"]
    verdicts = request.app[STORE].of_agent(name)
    if not verdicts:
        raise web.HTTPNotFound(text=f"no verdicts of agent {name}")
    found = changes(verdicts)
    reader = request.app[AGREEMENT]
    reading, acted = await asyncio.gather(reader.current(), request.app[ACTIONS].current())
    settings = request.app[SETTINGS]
    return _page(
        "agent.html",
        name=name,
        reading=reading,
        threshold=agent_threshold(reading, settings, name),
        latest_threshold=verdicts[-1].evaluation.get("warn_threshold"),
        calibration_refresh_s=settings.calibration_refresh_s,
        agreement=agreement_of(reading.tally, name) if reading.tally is not None else None,
        checks=reading.tally.check_rates(name) if reading.tally is not None else [],
        acted=acted,
        actions=actions_of(acted.tally, name) if acted.tally is not None else None,
        steers=steers_of(acted.tally, name) if acted.tally is not None else None,
        window_s=request.app[SETTINGS].action_followup_window_s,
        refresh_s=reader.every_s,
        overall=figures(verdicts),
        intervened=intervention_figures(verdicts),
        changes=found,
        plot=plot(bins(verdicts), found),
        latest=verdicts[-1],
        recent=list(reversed(verdicts[-20:])),
    )


def agent_threshold(
    reading: Reading[Tally], settings: Settings, agent: str
) -> dict[str, Any] | None:
    """The agent's alert threshold in use, learned from the tally as the workers learn it
    (`agreement/thresholds.py`), with its words; None while no tally has been read."""
    if reading.tally is not None:
        found = threshold_of(reading.tally, settings, agent, time.time()).as_dict()
        return {**found, "words": threshold_words(found, rule_json(settings))}
    if reading.state == "off":  # no Redis: no outcomes, nothing calibrated anywhere
        warn = settings.warn_threshold
        words = f"{warn}, configured (no Redis: no outcomes to calibrate from)"
        return {"threshold": warn, "source": "configured", "words": words}
    return None


async def sessions_page(request: web.Request) -> web.Response:
    book = request.app[SESSIONS]
    agent = request.query.get("agent", "")
    rows = book.newest(agent)[:PAGE_ROWS]
    return _page(
        "sessions.html",
        rows=[(s, mask_any(s.latest, ID_FIELDS)) for s in rows],
        held=len(book),
        agent=agent,
    )


async def modes_page(request: web.Request) -> web.Response:
    q = request.query
    agent, key = q.get("agent", ""), q.get("key", "")
    rows = mode_rows(request.app[STORE], agent, key)
    alerts = list(reversed(request.app[STORE].mode_alerts))[:PAGE_ROWS]
    reading = await request.app[AGREEMENT].current()
    return _page(
        "modes.html",
        rows=rows[:PAGE_ROWS],
        # where outcomes arrive: each mode's runs that truly failed (a key holds its agent)
        truly=reading.tally.mode_rates() if reading.tally is not None else {},
        alerts=[a for a in alerts if not key or (a.get("mode") or {}).get("key") == key],
        agent=agent,
        key=key,
        now=time.time(),
        held=len(request.app[STORE]),
    )


async def session_page(request: web.Request) -> web.Response:
    q = request.query
    key = q.get("key", "")
    session = request.app[SESSIONS].get(q.get("agent") or None, key)
    if session is None:
        raise web.HTTPNotFound(text=f"no verdict for session {key!r} (yet, or any more)")
    # masked by the worker; again here, as the request page does, whoever wrote the record
    revisions = [mask_any(r, ID_FIELDS) for r in session.in_order()]
    latest = revisions[-1]
    held = request.app[STORE]
    requests = {t["request_id"]: held.get(t["request_id"]) for t in latest.get("turns", [])}
    return _page(
        "session.html",
        s=latest,
        revisions=revisions,
        agent=agent_label(session.agent),
        held=requests,
    )


async def outcomes_docs(request: web.Request) -> web.Response:
    if not OUTCOMES_DOCS.is_file():  # an installed package carries no docs folder
        raise web.HTTPNotFound(text="docs/outcomes.md is in the tracejudge source repository")
    return web.Response(text=OUTCOMES_DOCS.read_text(encoding="utf-8"), content_type="text/plain")


async def health(request: web.Request) -> web.Response:
    store = request.app[STORE]
    return web.json_response(
        {
            "status": "ok",
            "verdicts": len(store),
            "sessions": len(request.app[SESSIONS]),
            "read": store.read,
            "unreadable": store.unreadable,
        }
    )


def make_app(
    settings: Settings,
    store: VerdictStore,
    agreement: AgreementReader | None = None,
    actions: ActionReader | None = None,
    sessions: SessionBook | None = None,
) -> web.Application:
    """`agreement`, `actions`: the readers of the agreement and action tallies (by default
    those in the Redis of TRACEJUDGE_REDIS_URL, none without it)."""
    # outermost: a Host not served is refused before anything else, and every answer, a 401,
    # a 404 or a redirect too, carries the headers
    middlewares = [guard_middleware(host_names(settings.allowed_hosts), HEADERS)]
    token = settings.ui_token.get_secret_value()
    if token:
        middlewares.append(_token_middleware(token))
    app = web.Application(middlewares=middlewares)
    app[STORE] = store
    app[SESSIONS] = sessions if sessions is not None else SessionBook(SESSION_CAPACITY)
    app[SETTINGS] = settings
    app[AGREEMENT] = agreement if agreement is not None else AgreementReader.of_settings(settings)
    app[ACTIONS] = actions if actions is not None else ActionReader.of_settings(settings)

    async def close_agreement(app: web.Application) -> None:
        await app[AGREEMENT].close()
        await app[ACTIONS].close()

    app.on_cleanup.append(close_agreement)
    app.add_routes(
        [
            web.get("/", verdicts_page),
            web.get("/requests/{request_id:.+}", request_page),
            web.get("/agents", agents_page),
            web.get("/agents/{agent:.+}", agent_page),
            web.get("/sessions", sessions_page),
            web.get("/session", session_page),
            web.get("/modes", modes_page),
            web.get("/docs/outcomes.md", outcomes_docs),
            web.get("/health", health),
        ]
    )
    return app


async def serve(settings: Settings) -> None:
    check_exposure(settings)
    quiet_library_logs()  # aiokafka logs every reconnect attempt while the broker is away
    store, sessions = VerdictStore(settings.ui_max_verdicts), SessionBook(SESSION_CAPACITY)
    runner = web.AppRunner(make_app(settings, store, sessions=sessions), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.ui_host, settings.ui_port).start()
    print(f"verdict explorer at http://{settings.ui_host}:{settings.ui_port}/", flush=True)
    reading = asyncio.create_task(feed(settings, store, sessions))
    try:
        await asyncio.Event().wait()
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        await runner.cleanup()
