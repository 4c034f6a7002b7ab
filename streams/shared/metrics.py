"""Prometheus metrics of one worker, served at GET /metrics on its web port.

prometheus-client's own types, in a registry per worker (tests build several in one process).
Label values come from closed sets (event types, statuses, error codes of our own, quadrants,
alert kinds, partitions), or, for agents, from the first MAX_AGENT_LABELS names seen (the rest
count as "(other)"), so no label can grow with the traffic. Values that live elsewhere
(open windows, consumer lag, Redis errors, the breaker) are read when Prometheus scrapes.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from tracejudge.models.agents import NO_AGENT
from tracejudge.models.events import REFUSALS
from tracejudge.models.version import PACKAGE_VERSION

# Seconds: a verdict is expected within milliseconds of the terminal event, a judged one within
# the model's latency; the tail buckets show backlogs.
VERDICT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
JUDGE_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)
CONTENT_TYPE = CONTENT_TYPE_LATEST
MAX_AGENT_LABELS = 100
OTHER_AGENTS = "(other)"


def quadrant(success: bool, incomplete: bool) -> str:
    """The seed's four verdict quadrants, as one label."""
    return ("success" if success else "failure") + ("_incomplete" if incomplete else "_complete")


@dataclass(frozen=True)
class AgentThreshold:
    """An agent's alert threshold in use, as /metrics shows it (`agreement.thresholds`)."""

    agent: str  # a bounded label: see `agreement.thresholds.alert_thresholds`
    source: str  # "calibrated" (from its outcomes) or "configured" (TRACEJUDGE_WARN_THRESHOLD)
    threshold: int
    outcomes: int  # the outcomes a calibration was learned from; 0 where configured


@dataclass
class Readings:
    """What the scrape reads from elsewhere; each is a callable so nothing is copied."""

    open_windows: Callable[[], int] = lambda: 0
    redis_errors: Callable[[], int] = lambda: 0
    offset_repairs: Callable[[], int] = lambda: 0
    breaker_open: Callable[[], bool] = lambda: False
    rate_limit_waits: Callable[[], int] = lambda: 0
    # the judge queue, where this process judges (`judging.consumer.JudgeRunner`)
    judge_queue_lag: Callable[[], int] = lambda: 0
    judge_oldest_job_age: Callable[[], float] = lambda: 0.0
    # the linger of the producer's new batches (`worker.linger.BacklogLinger`)
    producer_linger: Callable[[], float] = lambda: 0.0
    # (topic, partition) -> records not yet committed by the group
    lag: dict[tuple[str, int], int] = field(default_factory=dict)
    # the tracejudge_agreement_* families of the last refresh (`agreement.live.LiveAgreement`)
    agreement: Callable[[], list[Metric]] = lambda: []
    # each agent's alert threshold in use, from the process's calibration book
    alert_thresholds: Callable[[], list[AgentThreshold]] = lambda: []


class _Readings(Collector):
    def __init__(self, readings: Readings) -> None:
        self.readings = readings

    def collect(self) -> Iterable[Metric]:
        r = self.readings
        yield _gauge("tracejudge_open_windows", "Requests whose window is open.", r.open_windows())
        yield _counter("tracejudge_redis_errors", "Failed Redis writes.", r.redis_errors())
        yield _counter(
            "tracejudge_offset_repairs",
            "Ranges of input records skipped by the consumer and read again.",
            r.offset_repairs(),
        )
        yield _gauge(
            "tracejudge_judge_breaker_open",
            "1 while the LLM judge's breaker is open.",
            int(r.breaker_open()),
        )
        yield _counter(
            "tracejudge_judge_rate_limit_waits",
            "Judge calls that waited for the shared per-minute limit.",
            r.rate_limit_waits(),
        )
        yield _gauge(
            "tracejudge_judge_queue_lag",
            "Judge jobs not yet committed by the judge group on this process's partitions "
            "(being judged, or waiting in Kafka for a free call slot).",
            r.judge_queue_lag(),
        )
        yield _gauge(
            "tracejudge_judge_oldest_job_age_seconds",
            "Age of the oldest judge job this process took and has not finished (from its "
            "Kafka timestamp); 0 when none.",
            r.judge_oldest_job_age(),
        )
        yield _gauge(
            "tracejudge_producer_linger_seconds",
            "How long the batches the producer starts now wait for company: "
            "TRACEJUDGE_PRODUCER_LINGER_MS, or TRACEJUDGE_PRODUCER_BACKLOG_LINGER_MS while the "
            "worker works through a backlog.",
            r.producer_linger(),
        )
        lag = GaugeMetricFamily(
            "tracejudge_consumer_lag",
            "Input records not yet committed by the worker's group, per partition.",
            labels=["topic", "partition"],
        )
        for (topic, partition), behind in sorted(r.lag.items()):
            lag.add_metric([topic, str(partition)], behind)
        yield lag
        yield from _threshold_families(r.alert_thresholds())
        yield from r.agreement()


def _threshold_families(rows: list[AgentThreshold]) -> list[Metric]:
    threshold = GaugeMetricFamily(
        "tracejudge_alert_threshold",
        "The alert threshold this process holds each agent's verdicts to now, by agent and "
        "source: calibrated (learned from its outcomes, refreshed every "
        "TRACEJUDGE_CALIBRATION_REFRESH_S) or configured (TRACEJUDGE_WARN_THRESHOLD).",
        labels=["agent", "source"],
    )
    outcomes = GaugeMetricFamily(
        "tracejudge_alert_threshold_outcomes",
        "Outcomes (ok and failed) each agent's calibrated threshold was learned from; 0 where "
        "the configured threshold applies.",
        labels=["agent"],
    )
    for row in rows:
        threshold.add_metric([row.agent, row.source], row.threshold)
        outcomes.add_metric([row.agent], row.outcomes)
    return [threshold, outcomes]


def _gauge(name: str, doc: str, value: float) -> Metric:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> Metric:
    return CounterMetricFamily(name, doc, value=value)


SCORE_BUCKETS = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)


class AgentMetrics:
    """Per agent: its evaluations' scores and pass rate, and the model usage it reports."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.scores = Histogram(
            "tracejudge_evaluation_score",
            "Overall scores of the evaluations, by agent.",
            ["agent"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )
        self.verdicts = Counter(
            "tracejudge_agent_evaluations",
            "Evaluations by agent and whether they passed (pass rate: passed=true over all).",
            ["agent", "passed"],
            registry=registry,
        )
        self.calls = Counter(
            "tracejudge_model_calls",
            "Model calls the agents reported (steps with usage), by agent.",
            ["agent"],
            registry=registry,
        )
        self.tokens = Counter(
            "tracejudge_model_tokens",
            "Model tokens the agents reported, by agent and kind (input/output).",
            ["agent", "kind"],
            registry=registry,
        )
        self.cost = Counter(
            "tracejudge_model_cost_usd",
            "Model cost in USD the agents reported, by agent.",
            ["agent"],
            registry=registry,
        )
        self.interventions = Counter(
            "tracejudge_agent_interventions",
            "Interventions in final evaluations, by agent, kind and whether the run stopped "
            "after it.",
            ["agent", "kind", "stopped"],
            registry=registry,
        )
        self.saved = Counter(
            "tracejudge_intervention_saved",
            "What runs stopped by an intervention did not spend, estimated from their agent's "
            "median run (a floor), by agent and unit (tool_calls, tokens, cost_usd).",
            ["agent", "unit"],
            registry=registry,
        )
        # the teams' own dimensions (at most 4 per criteria table, named in the file; a score
        # the judge adds that nobody asked for is dropped): a bounded label
        self.dimension_scores = Histogram(
            "tracejudge_dimension_score",
            "The LLM judge's scores of the teams' own dimensions (the criteria file's "
            "`dimensions`), by agent and dimension.",
            ["agent", "dimension"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )
        self.control = Counter(
            "tracejudge_agent_control_records",
            "Control records the agents' clients report for their requests (with each final "
            "response), by agent and what the client did: delivered, unverified (signed, "
            "taken unchecked: the agent holds no key), refused_<why> (unsigned, unknown_key, "
            "expired_key, bad_signature, stale, other_run).",
            ["agent", "outcome"],
            registry=registry,
        )
        # per agent label: the reports' totals and how many runs' clients verify, for /health
        self.control_seen: dict[str, collections.Counter[str]] = {}
        self._agents: set[str] = set()

    def reported_control(self, agent_name: str | None, seen: Any) -> None:
        """A final response's `control` (models.events.ControlSeen): counted per agent."""
        agent = self.agent_label(agent_name)
        tally = self.control_seen.setdefault(agent, collections.Counter())
        tally["runs"] += 1
        tally["runs_verifying" if seen.verifies else "runs_not_verifying"] += 1
        found = {"delivered": seen.delivered, "unverified": seen.unverified}
        for why, n in seen.refused.items():
            key = f"refused_{why if why in REFUSALS else 'other'}"
            found[key] = found.get(key, 0) + n
        for outcome, n in found.items():
            if n:
                self.control.labels(agent, outcome).inc(n)
                tally[outcome] += n

    def agent_label(self, agent_name: str | None) -> str:
        """An agent's label value: its name among the first MAX_AGENT_LABELS seen, else
        "(other)", so a caller that names every request differently cannot grow the series."""
        name = agent_name or NO_AGENT
        if name in self._agents:
            return name
        if len(self._agents) < MAX_AGENT_LABELS:
            self._agents.add(name)
            return name
        return OTHER_AGENTS

    def labelled(self) -> list[str]:
        """The agent names that have a label of their own, sorted."""
        return sorted(self._agents)

    def evaluated(self, agent_name: str | None, score: int, passed: bool) -> None:
        agent = self.agent_label(agent_name)
        self.scores.labels(agent).observe(score)
        self.verdicts.labels(agent, "true" if passed else "false").inc()

    def intervened(
        self, agent_name: str | None, made: tuple[tuple[str, bool], ...], saved: Any
    ) -> None:
        """A final evaluation's interventions, and what stopping saved (models.outputs.Saving,
        None when not stopped or not estimated)."""
        agent = self.agent_label(agent_name)
        for kind, stopped in made:
            self.interventions.labels(agent, kind, "true" if stopped else "false").inc()
        if saved is not None:
            self.saved.labels(agent, "tool_calls").inc(saved.tool_calls)
            if saved.tokens is not None:
                self.saved.labels(agent, "tokens").inc(saved.tokens)
            if saved.cost_usd is not None:
                self.saved.labels(agent, "cost_usd").inc(saved.cost_usd)

    def add(self, agent_name: str | None, usage: Any) -> None:
        """A request's usage totals (models.outputs.Usage), counted once per evaluation."""
        agent = self.agent_label(agent_name)
        self.calls.labels(agent).inc(usage.model_calls)
        self.tokens.labels(agent, "input").inc(usage.input_tokens)
        self.tokens.labels(agent, "output").inc(usage.output_tokens)
        if usage.cost_usd is not None:
            self.cost.labels(agent).inc(usage.cost_usd)


def _session_series(r: CollectorRegistry) -> tuple[Counter, Counter]:
    """The session agent's: turns taken, and verdict revisions published."""
    turns = Counter(
        "tracejudge_session_turns",
        "Closed requests of sessions taken by the session agent, by status (added, "
        "replaced: judged again, same: delivered again).",
        ["status"],
        registry=r,
    )
    verdicts = Counter(
        "tracejudge_session_verdicts",
        "Session verdict revisions published, by agent, what made them (turn, resumed, "
        "ended, idle) and whether they passed.",
        ["agent", "cause", "passed"],
        registry=r,
    )
    return turns, verdicts


TOP_MODES = 5  # modes per agent with a series of their own; the rest are "(other)"
OTHER_MODES = "(other)"


class ModeSeries:
    """The modes agent's: each agent's top modes by runs in the window (the rest summed as
    "(other)", so a stream of distinct errors cannot grow the series), and announcements."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.runs = Gauge(
            "tracejudge_mode_runs",
            "Runs of each agent's failure modes in the window (TRACEJUDGE_MODES_WINDOW_S): its "
            f"top {TOP_MODES} by name, the rest as (other).",
            ["agent", "mode"],
            registry=r,
        )
        self.alerts = Counter(
            "tracejudge_mode_alerts",
            "Failure modes announced on the modes topic, by kind (new, jump, quiet).",
            ["agent", "kind"],
            registry=r,
        )
        self._shown: dict[str, set[str]] = {}  # agent label -> its mode labels with a series

    def show(self, agent: str, runs: dict[str, int]) -> None:
        """An agent's modes' runs in the window (name -> runs): its series set, those that
        left the top removed."""
        ranked = sorted(runs.items(), key=lambda kv: (-kv[1], kv[0]))
        top = {name[:80]: n for name, n in ranked[:TOP_MODES] if n > 0}
        rest = sum(n for _, n in ranked[TOP_MODES:])
        if rest:
            top[OTHER_MODES] = top.get(OTHER_MODES, 0) + rest
        for gone in self._shown.get(agent, set()) - set(top):
            self.runs.remove(agent, gone)
        for name, n in top.items():
            self.runs.labels(agent, name).set(n)
        self._shown[agent] = set(top)


class Metrics:
    """Every count the worker keeps: Prometheus series for /metrics, and `counts`, the plain
    tallies /health shows (events by status, dead letters by reason, repairs, ...)."""

    def __init__(self, readings: Readings | None = None) -> None:
        self.registry = CollectorRegistry()
        self.readings = readings or Readings()
        self.counts: collections.Counter[str] = collections.Counter()
        r = self.registry
        self.events = Counter(
            "tracejudge_events",
            "Input events by type and status (added, duplicate, late, counted: judging off, "
            "over_cap: past the cap on events per request).",
            ["type", "status"],
            registry=r,
        )
        self._event_counts: dict[tuple[str, str], Counter] = {}  # see event_count
        self.dead_letters = Counter(
            "tracejudge_dead_letters", "Records dead-lettered, by reason.", ["reason"], registry=r
        )
        self.evaluations = Counter(
            "tracejudge_evaluations",
            "Evaluations published, by judge status and verdict quadrant.",
            ["judge_status", "quadrant"],
            registry=r,
        )
        self.windows_closed = Counter(
            "tracejudge_windows_closed", "Windows closed, by cause.", ["closed_by"], registry=r
        )
        self.session_turns, self.session_verdicts = _session_series(r)
        self.modes = ModeSeries(r)
        self.reflections = Counter(
            "tracejudge_reflections", "Reflection requests published.", registry=r
        )
        self.alerts = Counter(
            "tracejudge_alerts", "Alerts published, by kind.", ["kind"], registry=r
        )
        self.responses = Counter(
            "tracejudge_responses",
            "Model answers by status (handled, duplicate, counted: judging off).",
            ["status"],
            registry=r,
        )
        self.retries = Counter("tracejudge_retries", "Retries, by type.", ["type"], registry=r)
        self.early_stops = Counter(
            "tracejudge_early_stops", "Early-stop decisions, by action.", ["action"], registry=r
        )
        self._in_flight_series(r)
        self.verdict_latency = Histogram(
            "tracejudge_verdict_latency_seconds",
            "From the terminal event's broker timestamp to its evaluation published.",
            buckets=VERDICT_BUCKETS,
            registry=r,
        )
        self.judge_latency = Histogram(
            "tracejudge_judge_call_seconds",
            "LLM judge calls, cache misses only, retries included.",
            buckets=JUDGE_BUCKETS,
            registry=r,
        )
        self.judge_errors = Counter(
            "tracejudge_judge_errors",
            "LLM judge calls that failed, by code.",
            ["code"],
            registry=r,
        )
        self.judge_cache_hits = Counter(
            "tracejudge_judge_cache_hits", "Judge verdicts served from the cache.", registry=r
        )
        self._outcome_series(r)
        self._judge_spend_series(r)
        self.agents = AgentMetrics(r)
        # the process's own series (CPU, memory, open files, GC) and which build runs
        ProcessCollector(registry=r)
        GCCollector(registry=r)
        PlatformCollector(registry=r)
        Info("tracejudge_build", "The running tracejudge's version.", registry=r).info(
            {"version": PACKAGE_VERSION}
        )
        r.register(_Readings(self.readings))

    def _in_flight_series(self, r: CollectorRegistry) -> None:
        """What runs are told while they run, the team's checks, and the group's moves."""
        self.revocations = Counter(
            "tracejudge_partitions_revoked",
            "Times this worker's partitions were revoked: each is a rebalance of its group (a "
            "worker joined or left, or this one missed its heartbeats).",
            registry=r,
        )
        self.interventions = Counter(
            "tracejudge_interventions",
            "Interventions sent to running requests, by kind and what was crossed.",
            ["kind", "crossed"],
            registry=r,
        )
        self.control_records = _control_counter(r)
        self.check_failures, self.check_errors = _check_counters(r)

    def _outcome_series(self, r: CollectorRegistry) -> None:
        """Outcome events: the figures they make are `agreement.live`'s."""
        self.outcomes = Counter(
            "tracejudge_outcomes",
            "Outcome events by result: joined (to the request's verdict), same (as the one "
            "counted), replaced (another of the same source), early (before the verdict: "
            "joined when it comes), unmatched (a request this worker does not know), failed "
            "(the agreement store was unavailable: dead-lettered), invalid (dead-lettered).",
            ["result"],
            registry=r,
        )

    def _judge_spend_series(self, r: CollectorRegistry) -> None:
        """What the LLM judge costs: its calls, tokens, spend and the requests a budget kept
        from it."""
        # by the model asked for (TRACEJUDGE_LLM_MODEL: one a process), never the model named
        # in the answers, which the server chooses
        self.judge_attempts = Counter(
            "tracejudge_judge_attempts",
            "Calls sent to the judge's server, retries included, by model.",
            ["model"],
            registry=r,
        )
        self.judge_tokens = Counter(
            "tracejudge_judge_tokens",
            "Tokens the judge's server reported, by model and kind (input, cached_input: "
            "part of input, output).",
            ["model", "kind"],
            registry=r,
        )
        self.judge_cost = Counter(
            "tracejudge_judge_cost_usd",
            "Judge spend in USD from the TRACEJUDGE_LLM_PRICE_* settings, by model.",
            ["model"],
            registry=r,
        )
        self.judge_budget_skips = Counter(
            "tracejudge_judge_budget_skips",
            "Requests not sent to the judge because a budget was spent, by period (minute, day).",
            ["period"],
            registry=r,
        )
        self.judge_expired = Counter(
            "tracejudge_judge_expired",
            "Judge jobs that waited longer than TRACEJUDGE_LLM_JOB_MAX_AGE_S: their rules' "
            "verdict became final (judge_status skipped, with the reason).",
            registry=r,
        )
        self.evaluations_pending = Counter(
            "tracejudge_evaluations_pending",
            "Rules' verdicts published at close for requests the LLM judge will amend (not "
            "in tracejudge_evaluations, which counts each request's final verdict once).",
            registry=r,
        )

    def event_count(self, event_type: str, status: str) -> Counter:
        """The events counter for one type and status. Its child is kept: `labels()` takes a
        lock and builds a key on every call, and this runs for every input event."""
        child = self._event_counts.get((event_type, status))
        if child is None:
            child = self._event_counts[(event_type, status)] = self.events.labels(
                event_type, status
            )
        return child

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))


def metric_names(metrics: Metrics) -> set[str]:
    """Every series name the registry can expose, whether or not it has samples yet (a
    labelled counter shows none until its first increment): counters with `_total`,
    histograms with `_bucket`, `_sum` and `_count`."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    names: set[str] = set()
    for family in metrics.registry.collect():
        names.update(family.name + end for end in suffixes.get(family.type, ("",)))
    return names


def _control_counter(r: CollectorRegistry) -> Counter:
    """A worker whose TRACEJUDGE_CONTROL_KEYS went missing publishes unsigned records that
    every signing agent drops: this says so where it is watched, not only at start."""
    return Counter(
        "tracejudge_control_records",
        "Interventions and early-stop decisions published, by signature: ed25519, hmac or "
        "none (agents with keys drop unsigned ones).",
        ["signature"],
        registry=r,
    )


def _check_counters(r: CollectorRegistry) -> tuple[Counter, Counter]:
    """A team's checks' failures and errors (a bounded set: named in settings or the file)."""
    failures = Counter(
        "tracejudge_check_failures",
        "Failures a team's checks found, by check and severity.",
        ["check", "severity"],
        registry=r,
    )
    errors = Counter(
        "tracejudge_check_errors",
        "Checks left out of a verdict, by kind: raised, timeout (past TRACEJUDGE_CHECK_TIMEOUT_S), "
        "bad_answer (not a Failure), ended (ended its check process).",
        ["check", "kind"],
        registry=r,
    )
    return failures, errors
