"""One frozen settings object, read from TRACEJUDGE_* environment variables or a file."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Self

from dotenv import dotenv_values
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from tracejudge.judges.agreement.calibration import CalibrationBook, CalibrationRule
from tracejudge.judges.checks.book import CheckBook
from tracejudge.judges.inflight.budgets import BudgetBook
from tracejudge.judges.inflight.early_stop import DEFAULT_MAX_ITERATIONS, EarlyStopPolicy
from tracejudge.judges.inflight.escalation import CEILING_CALLS
from tracejudge.judges.inflight.loops import LoopRules
from tracejudge.judges.llm.client import LLMConfig
from tracejudge.judges.llm.criteria import CriteriaBook
from tracejudge.judges.llm.prompt import input_token_budget
from tracejudge.judges.llm.sampling import parse_rates
from tracejudge.judges.masking.redact import mask

# Defaults of the judges' own settings are theirs: written there once, read here.
from tracejudge.judges.rules.baselines import DEFAULT_EPOCH_RUNS, DEFAULT_MIN_RUNS
from tracejudge.judges.rules.judge import DEFAULT_TOOL_CALL_BUDGET
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.models.errors import ConfigurationError
from tracejudge.models.signing import ControlKeys, OutcomeKeys
from tracejudge.prompts import final_judge_prompt

CONFIG_FILE_ENV = "TRACEJUDGE_CONFIG_FILE"
PREFIX = "TRACEJUDGE_"
# TRACEJUDGE_ variables that are not settings: the CLI's config file, the scripts' download cache
NOT_SETTINGS = frozenset({CONFIG_FILE_ENV, "TRACEJUDGE_CACHE"})
# old name -> new name: the old one still works, with a deprecation line, when the new one is
# not given (names follow one pattern: `<thing>_enabled`, as llm_judge_enabled)
RENAMED = {"enable_reflection": "reflection_enabled"}


MIN_INPUT_TOKENS = 1000  # the judge's input at least: a trace's goal, answer and a few steps


class SettingsError(ValueError):
    """Configuration that cannot be used: one line per problem, naming the variable."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class SettingProblem(ValueError):
    """What a check across settings (a model validator) found, with the settings it is about
    (field names): its line names the one, or says "settings:" for several, as a field's own
    error names its field (`_bad_value`)."""

    def __init__(self, message: str, *names: str) -> None:
        # named in itself too, for a Settings(...) made in code (no `_bad_value` line)
        one = f"{PREFIX}{names[0].upper()}: " if len(names) == 1 else ""
        super().__init__(one + message)
        self.message = message
        self.names = names


class OperationSettings(BaseModel):
    """What is judged at all, and how the worker runs: its state, web server, pipeline
    timings, logs."""

    enabled: bool = Field(
        True,
        description="false: events are consumed and counted, nothing is judged, no output.",
    )
    mode: Literal["online"] = Field(
        "online", description="Evaluation mode; online (judge as requests end) is the only one."
    )
    trace_capture: bool = Field(
        True,
        description="false: windows keep counters and the final response, no step details "
        "(the judges then see the task and the answer only).",
    )
    data_dir: str = Field(".tracejudge-data", description="Worker's local state directory.")
    table_store: Literal["rocksdb", "memory"] = Field(
        "rocksdb",
        description="Where the worker keeps its tables: rocksdb (on disk under data_dir; a "
        "restart reads only the changelogs' tail) or memory (rebuilt from the changelogs at "
        "every start).",
    )
    web_host: str = Field("127.0.0.1", description="Address of the worker's web server.")
    web_port: int = Field(6066, description="Port of the worker's web server (GET /health).")
    idle_timeout_s: float = Field(300.0, gt=0, description="Close a window after this idle time.")
    idle_check_interval_s: float = Field(
        5.0, gt=0, description="How often idle windows are looked for."
    )
    closed_retention_s: float = Field(
        3600.0, ge=0, description="How long a closed request is remembered to drop late events."
    )
    producer_linger_ms: float = Field(
        5.0,
        ge=0,
        description="How long the worker's producer waits to put records together in one "
        "request: table changelogs, verdicts, judge jobs, dead letters. Early-stop decisions "
        "and retry requests, which agents wait on, go at once. Under load, fewer produce "
        "requests on the window agent's thread.",
    )
    producer_backlog_linger_ms: float = Field(
        25.0,
        ge=0,
        description="The producer's linger while the worker works through a backlog (500 or "
        "more input records behind the one it handles): each record then waits for those before "
        "it anyway, and longer batches take fewer produce requests from the worker and the "
        "broker. At or below TRACEJUDGE_PRODUCER_LINGER_MS: the same linger always.",
    )
    step_hold_s: float = Field(
        10.0,
        ge=0,
        description="How long an open window's steps may stay in memory only, their input "
        "records not yet acknowledged (a crash reads them again), before they are written to "
        "the changelog. Requests shorter than this write no step at all. 0: written at once.",
    )
    changelog_retention_s: float = Field(
        21600.0,
        ge=600,
        description="How long the window-steps changelog keeps a record. Closed windows leave "
        "it by this retention (no tombstones); an open window's records are written again "
        "when half of it has passed. A restart without the local store reads this much.",
    )
    max_event_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="Input values over this size are dead-lettered (too_large) unparsed.",
    )
    dlq_payload: Literal["keep", "mask", "drop"] = Field(
        "keep",
        description="What a dead letter's value is: keep (the original, as Kafka Connect does; "
        "it holds nothing the input topic does not), mask (its text masked like every output) "
        "or drop (no value; headers identify it). The reason header is masked in every mode.",
    )
    status_workers: str = Field(
        "",
        description="Comma-separated base URLs of workers whose /health `tracejudge status` "
        "shows (default: this host's web port).",
    )
    otel_host: str = Field("127.0.0.1", description="Address `tracejudge otel` listens on.")
    otel_max_spans_per_batch: int = Field(
        10_000,
        ge=1,
        description="Spans `tracejudge otel` reads of one export: past it the rest are refused "
        "and the exporter told so (OTLP partial success, rejected_spans), and logged. The SDKs' "
        "batch processors send at most 512 by default.",
    )
    otel_grpc_port: int = Field(4317, description="OTLP/gRPC port of `tracejudge otel`.")
    otel_http_port: int = Field(4318, description="OTLP/HTTP port of `tracejudge otel`.")
    otel_token: SecretStr = Field(
        SecretStr(""),
        description="Bearer token `tracejudge otel` requires (secret; never logged): "
        "`Authorization: Bearer TOKEN` over HTTP, `authorization` metadata over gRPC. Required "
        "when TRACEJUDGE_OTEL_HOST is not a loopback address; 16 characters or more.",
    )
    otel_allowed_origins: str = Field(
        "",
        description="Browser origins (`https://app.example`, comma-separated) allowed to send "
        "traces to `tracejudge otel`; a request with any other `Origin` header is refused, so "
        "no web page the operator opens can post made-up traces. Exporters send no Origin.",
    )
    otel_capture_content: bool = Field(
        False,
        description="Read message content (prompts, answers, tool arguments) from GenAI spans; "
        "off by default, as OpenTelemetry keeps it opt-in.",
    )
    otel_evaluations_endpoint: str = Field(
        "",
        description="OTLP/HTTP logs URL (e.g. http://collector:4318/v1/logs): each evaluation "
        "is also sent there as a `gen_ai.evaluation.result` event, linked to the request's "
        "trace and span when it came with them. Empty: off.",
    )
    otel_evaluations_headers: SecretStr = Field(
        SecretStr(""),
        description="Headers for that endpoint, `name=value` pairs separated by commas (e.g. "
        "an API key).",
    )
    otel_request_end: Literal["local_root", "root"] = Field(
        "local_root",
        description="Which ending span ends a trace's request in `tracejudge otel`: the local "
        "root (no parent, or a parent in another process, as behind an instrumented gateway; "
        "SDKs flag remote parents in OTLP) or only a span with no parent at all. A trace "
        "whose end never comes closes by the idle timeout.",
    )
    ui_host: str = Field(
        "127.0.0.1",
        description="Address the verdict explorer (`tracejudge ui`) listens on; any address but "
        "a loopback one needs TRACEJUDGE_UI_TOKEN.",
    )
    ui_port: int = Field(8090, description="Port of the verdict explorer.")
    ui_token: SecretStr = Field(
        SecretStr(""),
        description="Access token of the verdict explorer: sent as `Authorization: Bearer`, or "
        "once as `?token=` (then kept in a cookie). Empty: loopback only.",
    )
    allowed_hosts: str = Field(
        "",
        description="Host names the explorer, the worker's pages and the OTLP receiver answer "
        "to, besides IP addresses and localhost (comma-separated: a Service's or an ingress's "
        "name; `*`: any). Another name gets 421: a web page that makes its own name resolve to "
        "a listener (DNS rebinding) reads nothing.",
    )
    outcome_keys: SecretStr = Field(
        SecretStr(""),
        description="The sources outcomes are taken from, each with its own key (secret; never "
        "logged): `source:key,source:key`, keys of 32 characters or more. An outcome is joined "
        "only when its `source` is named and signed with that source's key (the client's "
        "`outcome(..., key=...)`); any other is counted as rejected, never joined. Empty: "
        "every outcome on the events topic is taken.",
    )
    control_keys: SecretStr = Field(
        SecretStr(""),
        description="Keys that sign interventions and early-stop decisions (secret; never "
        "logged), comma-separated; the first that can sign does, every one verifies, so a key "
        "rotates without downtime. HMAC keys, the same on the agents' clients: "
        "`hmac:KID:SECRET[@YYYY-MM-DD]` (`tracejudge keys --hmac`; records name the key, are "
        "bound to the topic prefix and refused after the date) or a bare secret of 32 "
        "characters or more. Or Ed25519 (`tracejudge keys`): `ed25519-private:KID:...` "
        "here, and the public `ed25519:KID:...[@YYYY-MM-DD]` on the agents, which then "
        "cannot sign. The clients act only on control records one of their keys verifies. "
        "Empty: nothing is signed, "
        "and anyone who can write to the control topic or Redis can stop any agent.",
    )
    ui_open: bool = Field(
        False,
        description="Serve the explorer without a token on a non-loopback address: only where "
        "something else limits who reaches it (compose publishes its port on the host's "
        "loopback only).",
    )
    ui_look_back_s: float = Field(
        7 * 86400.0,
        gt=0,
        description="How far back the explorer reads verdicts from the topics when it starts.",
    )
    ui_max_verdicts: int = Field(
        20000, ge=100, description="Verdicts the explorer holds in memory (the newest)."
    )
    debug_endpoints: bool = Field(
        False, description="Serve /debug/tasks (every coroutine's stack) on the web port."
    )
    broker_session_timeout_s: float = Field(
        60.0,
        gt=0,
        description="Kafka group session timeout: how soon a dead worker's "
        "partitions move to the others.",
    )
    stall_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Input lag with no progress this long makes the worker exit "
        "for its supervisor to restart it.",
    )
    broker_down_exit_s: float = Field(
        120.0,
        gt=0,
        description="A broker unreachable this long makes the worker exit for its supervisor "
        "(/health says broker_unreachable after 10 s).",
    )
    stop_timeout_s: float = Field(
        8.0,
        gt=0,
        description="On SIGTERM, exit after this long even if the graceful stop is not done "
        "(uncommitted events are delivered again).",
    )
    embedded_broker_timing: bool = Field(
        False, description="Short group timeouts for the embedded demo broker (Tansu) only."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level: debug, info, warning, error."
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="Log lines as text or as one JSON object per line."
    )

    @field_validator("control_keys", "outcome_keys")
    @classmethod
    def _keys_usable(cls, value: SecretStr, info: ValidationInfo) -> SecretStr:
        # a short key, or an outcome key without its source: a clear error at start
        parse = ControlKeys.parse if info.field_name == "control_keys" else OutcomeKeys.parse
        parse(value.get_secret_value())
        return value

    def control_key_set(self) -> ControlKeys | None:
        return ControlKeys.parse(self.control_keys.get_secret_value())

    def signing_keys(self, topic_prefix: str) -> ControlKeys | None:
        """The keys the worker signs control records with, bound to its deployment (its topic
        prefix): keys that cannot sign (Ed25519 public keys only, an agent's set) stop the start
        with the reason."""
        keys = self.control_key_set()
        if keys is not None and not keys.can_sign:
            raise ConfigurationError(
                "TRACEJUDGE_CONTROL_KEYS on the worker holds public keys only: give it the "
                "`ed25519-private:...` key (or HMAC keys) it signs with; the agents get the "
                "public one (`tracejudge keys`)"
            )
        return None if keys is None else keys.for_deployment(topic_prefix)

    def outcome_key_set(self) -> OutcomeKeys | None:
        return OutcomeKeys.parse(self.outcome_keys.get_secret_value())


class KafkaSettings(BaseModel):
    """The broker: where it is, how to connect, the topics and the consumer group."""

    kafka_bootstrap: str = Field(
        "127.0.0.1:9092",
        description="Kafka bootstrap servers: host:port, several separated by commas.",
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT",
        description="How every Kafka client connects: PLAINTEXT, SSL, SASL_PLAINTEXT or "
        "SASL_SSL (TLS with SASL; what managed Kafka services require).",
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", description="SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."
    )
    kafka_sasl_username: str = Field("", description="SASL user name.")
    kafka_sasl_password: SecretStr = Field(
        SecretStr(""), description="SASL password (secret; never logged)."
    )
    kafka_ssl_cafile: str = Field(
        "", description="CA certificates (PEM) to trust; empty: the system's trust store."
    )
    kafka_ssl_certfile: str = Field(
        "", description="Client certificate (PEM) for mutual TLS; empty: none."
    )
    kafka_ssl_keyfile: str = Field("", description="Private key (PEM) of the client certificate.")
    topic_prefix: str = Field("tracejudge.", description="Prefix of every topic name.")
    partitions: int = Field(4, ge=1, description="Partitions of every topic the worker creates.")
    replication_factor: int | None = Field(
        None,
        ge=1,
        description="Replication factor of the topics the worker creates; not set: the "
        "cluster's broker count up to 3 (1 on a single broker). Set, it wins: the operator knows "
        "what the cluster will grow to or can spare. Topics with 3 or more replicas get "
        "min.insync.replicas 2, so a write acknowledged with acks=all survives a broker's loss.",
    )
    app_id: str = Field("tracejudge", description="Consumer group and changelog topic prefix.")
    kafka_max_request_bytes: int = Field(
        1_048_588,
        ge=1_000_000,
        description="Producer request size limit; the broker's message.max.bytes (Kafka's "
        "default here), so that any record the broker accepted can be dead-lettered whole.",
    )

    @field_validator("replication_factor", mode="before")
    @classmethod
    def _replication_unset(cls, value: Any) -> Any:
        # empty (as in an env file's `TRACEJUDGE_REPLICATION_FACTOR=`): chosen from the cluster
        if isinstance(value, str) and value.strip().lower() in ("", "unset", "none", "auto"):
            return None
        return value

    @field_validator("kafka_bootstrap")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        # Kafka's bootstrap.servers form; the port is required (as Java clients require it)
        # rather than defaulted: a bare host was reported as an unreachable broker
        for server in value.split(","):
            host, colon, port = server.strip().rpartition(":")
            bare_ipv6 = ":" in host and not (host.startswith("[") and host.endswith("]"))
            if (
                not colon
                or not host
                or bare_ipv6
                or not port.isdigit()
                or not 0 < int(port) < 65536
            ):
                raise ValueError(
                    f"{server.strip()!r} is not host:port (e.g. localhost:9092, [::1]:9092; "
                    "several separated by commas)"
                )
        return value


class RedisSettings(BaseModel):
    """Redis, where agents look verdicts and early-stop decisions up."""

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis URL for verdict look-ups; empty disables Redis.",
    )
    evaluation_ttl_s: int = Field(86400, ge=1, description="TTL of evaluations kept in Redis.")
    agreement_retention_s: int = Field(
        7 * 86400,
        ge=3600,
        description="How long Redis keeps what a final verdict leaves for its outcome (about "
        "150 bytes a request), the outcomes, and the agreement tally they make: an outcome "
        "arriving later than this after its verdict is counted unmatched, and the live "
        "agreement figures cover this period.",
    )
    action_followup_window_s: int = Field(
        3600,
        ge=1,
        description="A follow-up of a reflection request whose verdict comes later than this "
        "after its origin's counts as late in the action figures (tracejudge_action_*), not "
        "as followed up. The origin's verdict is kept for the agreement retention: later "
        "follow-ups are not joined at all.",
    )
    timelines: Literal["all", "flagged", "off"] = Field(
        "flagged",
        description="Which requests keep their steps (clipped to 300 characters and masked) in "
        "Redis beside the evaluation, with the same TTL, for `tracejudge show`: all, flagged "
        "(not passed, not success, or incomplete; and every judged one) or off. Masking them "
        "costs about as much as the rules.",
    )


class RuleSettings(BaseModel):
    """How the rules decide, and the other judges: windows, thresholds, reflection, baselines,
    early stops, retries."""

    max_trace_steps: int = Field(50, ge=1, description="Steps kept in detail per request.")
    max_events_per_request: int = Field(
        20_000,
        ge=100,
        description="Events read per request: past it an event is counted, not kept, counted "
        "or checked (a final_response still closes the request), and the evaluation says how "
        "many (`events_over_cap`); /metrics counts them as tracejudge_events_total{status="
        '"over_cap"}. Bounds what one request costs the worker and its changelog.',
    )
    trace_tail_steps: int = Field(
        10,
        ge=0,
        le=200,
        description="Beyond TRACEJUDGE_MAX_TRACE_STEPS, the last steps also kept in detail (in "
        "memory) so the judge sees how a long run ended; failed steps beyond the limit keep a "
        "digest (tool, arguments, head and tail of the error) whatever this says.",
    )
    warn_threshold: int = Field(
        Policy.warn_threshold,
        ge=0,
        le=100,
        description="Scores below it raise an alert (an agent with a calibration uses its own: "
        "TRACEJUDGE_CALIBRATION_ENABLED).",
    )
    calibration_enabled: bool = Field(
        True,
        description="Per agent, replace TRACEJUDGE_WARN_THRESHOLD by the threshold its own "
        "outcomes say alerts at most TRACEJUDGE_CALIBRATION_TARGET of its ok runs, once it has "
        "the minimum of ok and failed outcomes (learned from the agreement tally in Redis, "
        "refreshed every TRACEJUDGE_CALIBRATION_REFRESH_S; verdicts made after use it, and "
        "each names its calibration). On by default: nothing changes until outcomes are sent, "
        "and a fixed threshold alerts anywhere from none to most of an agent's good runs "
        "depending on how its scores fall. Off: the fixed threshold for every agent.",
    )
    calibration_target: float = Field(
        CalibrationRule.target,
        gt=0,
        le=0.5,
        description="The share of an agent's ok runs a calibrated threshold may alert. 5 % by "
        "default: alerts people keep reading (one in twenty good runs), while the threshold "
        "stays high enough to flag most runs that score like failures.",
    )
    calibration_min_ok_runs: int = Field(
        CalibrationRule.min_ok_runs,
        ge=1,
        description="Ok outcomes an agent needs before its threshold is calibrated. Below about "
        "30 the threshold rests on the lowest one or two ok runs and moves many points with "
        "each new outcome (and under 1/target - 1 no threshold can keep the target at all).",
    )
    calibration_min_failed_runs: int = Field(
        CalibrationRule.min_failed_runs,
        ge=1,
        description="Failed outcomes an agent needs before its threshold is calibrated: both "
        "kinds present, so the outcomes come from something that reports failures, not only "
        "successes.",
    )
    calibration_refresh_s: float = Field(
        60.0,
        ge=1,
        description="How often the worker and `tracejudge judge` learn the calibrations again "
        "from the agreement tally (one Redis read of the tally each time).",
    )
    reflection_enabled: bool = Field(
        Policy.reflection_enabled, description="Emit reflection requests."
    )
    max_reflection_rounds: int = Field(
        Policy.max_reflection_rounds, ge=0, description="Reflection rounds before giving up."
    )
    tool_call_budget: int = Field(
        DEFAULT_TOOL_CALL_BUDGET,
        ge=0,
        description="A hard budget of tool calls per request, beyond which efficiency drops; "
        "0: none (a request is judged long only against its own agent's normal).",
    )
    baseline_min_runs: int = Field(
        DEFAULT_MIN_RUNS,
        ge=1,
        description="Closed requests an agent needs before its runs are judged against its "
        "normal (calls, state changes, failures, duration); until then no relative penalty.",
    )
    baseline_epoch_runs: int = Field(
        DEFAULT_EPOCH_RUNS,
        ge=10,
        description="An agent's normal is learned from its last 1-2 epochs of this many "
        "requests (per partition): older runs are forgotten.",
    )
    early_stop_enabled: bool = Field(True, description="Decide early stops of iterative loops.")
    min_iterations: int = Field(
        EarlyStopPolicy.min_iterations, ge=1, description="No early stop before this iteration."
    )
    max_iterations: int = Field(
        DEFAULT_MAX_ITERATIONS,
        ge=1,
        description="Rounds of an iterative loop whose events carry no max_iterations: no "
        "early-stop decision at the last one, and the evaluation reports iterations against it.",
    )
    early_stop_consecutive: int = Field(
        EarlyStopPolicy.consecutive_successes,
        ge=1,
        description="Successful executions in a row that give a hint.",
    )
    interventions_enabled: bool = Field(
        True,
        description="Tell a run on the control topic, while it runs, that it crossed its budget "
        "or is in a loop (judges/inflight/loops.py, judges/inflight/budgets.py).",
    )
    loop_ceiling_calls: int = Field(
        CEILING_CALLS,
        ge=0,
        description="Tool calls past which a run of an agent with no normal learned yet counts "
        "as long: its loop, found again after a steer, is stopped (with a normal, the agent's "
        "own 90th percentile decides). 0: such runs are only steered.",
    )
    budgets_file: str = Field(
        "",
        description='A TOML file of per-request budgets: [default] and [agents."NAME"] '
        "tables of steps, tool_calls, tokens, cost_usd, wall_s, and the agents' own loop_* "
        "thresholds (judges/inflight/budgets.py); checked at start. Empty: no budgets.",
    )
    loop_repeat: int = Field(
        LoopRules.repeat, ge=0, le=32, description="The same call and result in a row (0: off)."
    )
    loop_cycles: int = Field(
        LoopRules.cycles, ge=0, le=32, description="Turns of two calls taking turns (0: off)."
    )
    loop_same_failure: int = Field(
        LoopRules.same_failure, ge=0, le=32, description="The same failure in a run (0: off)."
    )
    loop_no_new_result: int = Field(
        LoopRules.no_new_result,
        ge=0,
        le=32,
        description="Calls in a row with no result the run had not seen (0: off).",
    )

    checks: str = Field(
        "",
        description="A team's own checks, comma-separated module:function, run on every closed "
        "run of every agent (docs/checks.md); packages add theirs through the "
        "tracejudge.checks entry-point group. Empty: none.",
    )
    checks_file: str = Field(
        "",
        description='A TOML file of per-agent checks: [default] and [agents."NAME"] tables of '
        "code checks and checks without code (never_call, call_before, needs_confirmation, "
        "max_calls, final_must_match, final_must_not_match; docs/checks.md); checked at start.",
    )
    check_timeout_s: float = Field(
        2.0,
        gt=0,
        description="How long a run's checks may take together; a code check still running "
        "then is ended with its check process, counted and left out, the verdict made without "
        "it.",
    )
    check_processes: int = Field(
        2,
        ge=1,
        le=64,
        description="Processes that run a team's code checks, apart from the worker's: a check "
        "that hangs or spins the CPU holds one of them until its time limit ends it, never the "
        "worker's event loop (docs/checks.md).",
    )

    _budget_book: BudgetBook = PrivateAttr(default_factory=BudgetBook)
    _check_book: CheckBook = PrivateAttr(default_factory=CheckBook)

    @model_validator(mode="after")
    def _interventions_readable(self) -> Self:
        # checked with the other settings, so a bad threshold or budgets file stops every
        # command at start, before anything connects, naming what is wrong
        for rule in ("repeat", "cycles", "same_failure", "no_new_result"):
            try:  # one at a time (the others at their defaults), to name the one
                LoopRules(**{rule: getattr(self, f"loop_{rule}")})
            except ValueError as exc:
                raise SettingProblem(str(exc), f"loop_{rule}") from None
        # read once, here: the worker's budget_book() is this book, not a second reading
        try:
            self._budget_book = (
                BudgetBook.read(Path(self.budgets_file)) if self.budgets_file else BudgetBook()
            )
        except ValueError as exc:
            raise SettingProblem(str(exc), "budgets_file") from None
        try:  # team modules imported now: a typo stops the start, not a run
            self._check_book = CheckBook.read(self.checks, self.checks_file)
        except ValueError as exc:
            name = "checks_file" if "checks file" in str(exc) else "checks"
            raise SettingProblem(str(exc), name) from None
        return self

    generic_max_retries: int = Field(
        1, ge=0, description="Retries of a generic or clarification-only answer."
    )


class JudgeSettings(BaseModel):
    """The LLM judge: the endpoint, how it is asked, and how it runs unattended."""

    rule_weight: float = Field(
        Policy.rule_weight,
        ge=0,
        le=1,
        description="Weight w of the rule score: overall = w*rule + (1-w)*llm.",
    )
    # None only until `Settings` reads it: its validator derives the default from the
    # endpoint settings, so the documented default is "unset", never a false `false`
    llm_judge_enabled: bool | None = Field(
        None,
        description="Judge closed requests with an LLM: true or false. Unset: on as soon as a "
        "judge endpoint is configured (TRACEJUDGE_LLM_BASE_URL or TRACEJUDGE_LLM_API_KEY set), "
        "off otherwise.",
    )
    worker_judges: bool = Field(
        True,
        description="With the LLM judge on, the worker also consumes the judge-requests topic and "
        "makes the judge calls. Set false where `tracejudge judge` processes do it, scaled on "
        "their own.",
    )
    llm_base_url: str = Field(
        "https://api.openai.com/v1", description="OpenAI-compatible API base URL (…/v1)."
    )
    llm_model: str = Field("gpt-4o-mini", description="Model name sent to the API.")
    llm_api_key: SecretStr = Field(
        SecretStr(""), description="API key (secret; never logged). Empty: no auth header."
    )
    llm_timeout_s: float = Field(
        LLMConfig.timeout_s, gt=0, description="Overall deadline per judged request."
    )
    llm_connect_timeout_s: float = Field(
        LLMConfig.connect_timeout_s, gt=0, description="TCP connect timeout."
    )
    llm_max_attempts: int = Field(
        LLMConfig.max_attempts,
        ge=1,
        description="Attempts per request (retries + 1); waits on a 429 or 503 use none.",
    )
    llm_concurrency: int = Field(
        LLMConfig.concurrency,
        ge=1,
        description="Most judge calls in flight per worker; fewer while the server answers "
        "429 or 503, back up as it answers again.",
    )
    llm_rpm: int = Field(
        0, ge=0, description="Requests per minute shared by all workers via Redis; 0: no limit."
    )
    llm_tpm: int = Field(
        0,
        ge=0,
        description="Judge tokens per minute shared by all workers via Redis, as "
        "TRACEJUDGE_LLM_RPM: a call reserves its estimated input plus TRACEJUDGE_LLM_MAX_TOKENS "
        "before it goes out, corrected to the usage the server reports; a call finding the "
        "minute spent waits for the next (within TRACEJUDGE_LLM_QUEUE_WAIT_S). 0: no limit.",
    )
    llm_criteria_file: str = Field(
        "",
        description="A TOML file of a team's own criteria for the LLM judge: [default] and "
        '[agents."NAME"] tables of criteria, version, good_example, bad_example '
        "(judges/llm/criteria.py), given to the judge as the operator's instructions and named "
        "in the evaluation's judge provenance; checked at start.",
    )
    _criteria_book: CriteriaBook = PrivateAttr(default_factory=CriteriaBook)

    @model_validator(mode="after")
    def _criteria_readable(self) -> Self:
        # read once, at start: a bad criteria file stops every command naming what is wrong
        try:
            path = self.llm_criteria_file
            self._criteria_book = CriteriaBook.read(Path(path)) if path else CriteriaBook()
        except ValueError as exc:
            raise SettingProblem(str(exc), "llm_criteria_file") from None
        return self

    llm_sample_rate: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Share judged of the requests that are not flagged (of all, with "
        "TRACEJUDGE_LLM_JUDGE_FLAGGED=false) and that no TRACEJUDGE_LLM_SAMPLE_RATES entry is "
        "about; the same ones every time (a hash of the request id). The default, 1, judges "
        "every closed request: a judge turned on (an endpoint, or only TRACEJUDGE_LLM_API_KEY) "
        "reads every run until told to read fewer; the start logs the share.",
    )
    llm_sample_rates: str = Field(
        "",
        description="Rates per agent or agent version instead of TRACEJUDGE_LLM_SAMPLE_RATE, "
        "as agent=rate,agent@version=rate (glob patterns: planner@2.*=0.5,research-*=0.05); "
        "an entry with a version wins over one without, else the first that matches.",
    )
    llm_judge_flagged: bool = Field(
        True,
        description="Judge every flagged request (not passed, not success, or incomplete by the "
        "rules) whatever the sample rates; false: flagged requests are sampled like the rest.",
    )
    llm_max_input_chars: int | None = Field(
        None,
        ge=2000,
        description="A limit in characters on the judge's input beside its token budget "
        "(TRACEJUDGE_LLM_CONTEXT_TOKENS); unset: the token budget alone.",
    )
    llm_context_tokens: int = Field(
        8192,
        ge=2048,
        description="The judge model's context size in tokens: the system prompt, the answer's "
        "schema, the trace and the answer's reserve fit in it (tokens estimated to err high: 3 "
        "ASCII characters or 1 other character a token). When a trace does not fit, its goal, "
        "final answer and failed steps are kept first, then its last steps; the input says "
        "what it left out. Raise it for a large-context model (e.g. 128000) at more cost.",
    )
    llm_output_reserve_tokens: int | None = Field(
        None,
        ge=64,
        description="Tokens of the context kept for the answer; unset: "
        "TRACEJUDGE_LLM_MAX_TOKENS (a server refuses a request whose input and max tokens "
        "exceed the context).",
    )
    llm_tool_choice: str = Field(
        LLMConfig.tool_choice,
        pattern="^(named|required|auto|none)$",
        description="tool_choice: named (OpenAI, vLLM), required, auto (Ollama), none.",
    )
    llm_output_mode: Literal["tools", "json_schema"] = Field(
        "tools",
        description="How the judge is asked to answer: tools (a final_judge function call: "
        "OpenAI, vLLM with tool parsing, Ollama) or json_schema (response_format with the "
        "verdict's schema, strict: OpenAI, vLLM, llama.cpp's server, Ollama's OpenAI API).",
    )
    llm_schema_strict: bool = Field(
        True,
        description="json_schema mode: strict schema (OpenAI; string lengths left out, since "
        "strict refuses them) or not (llama.cpp, vLLM, Ollama: the whole schema, lengths "
        "included, becomes a grammar, which keeps small models from looping in a string).",
    )
    llm_temperature: float | None = Field(
        LLMConfig.temperature,
        ge=0,
        le=2,
        description="Sampling temperature; unset: not sent (OpenAI's reasoning models, "
        "o-series and gpt-5, refuse any but their own).",
    )
    llm_max_tokens: int = Field(
        LLMConfig.max_tokens, ge=64, description="Max tokens of the judge's answer."
    )
    llm_retry_max_tokens: int | None = Field(
        None,
        ge=0,
        description="An answer cut at TRACEJUDGE_LLM_MAX_TOKENS (finish_reason length; "
        "judge_error truncated when the retry is cut too) is asked once more with twice the "
        "budget, at most this and at most what TRACEJUDGE_LLM_CONTEXT_TOKENS leaves beside the "
        "input; unset: twice, 0: no retry. A reasoning model's hidden reasoning spends the same "
        "budget: raise TRACEJUDGE_LLM_MAX_TOKENS for one (docs/judging.md).",
    )
    llm_token_param: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens",
        description="Name under which TRACEJUDGE_LLM_MAX_TOKENS is sent: max_tokens (vLLM, "
        "Ollama, llama.cpp, older OpenAI models) or max_completion_tokens (OpenAI's reasoning "
        "models, which refuse max_tokens; it also counts their hidden reasoning tokens).",
    )
    llm_seed: int | None = Field(
        LLMConfig.seed,
        description="Seed sent with every call, for answers as repeatable as the server makes "
        "them; unset: not sent.",
    )
    llm_queue_wait_s: float = Field(
        LLMConfig.queue_wait_s,
        gt=0,
        description="Longest wait of a judge call for a free slot in its worker (and a "
        "TRACEJUDGE_LLM_RPM permit) before it goes out; then a timeout fallback. "
        "TRACEJUDGE_LLM_TIMEOUT_S starts when the call goes out.",
    )
    llm_job_max_age_s: float = Field(
        600.0,
        gt=0,
        description="Longest a judge job may wait in the judge queue (from its request's "
        "close). Older, it is not sent: the rules' verdict, published at close as pending, "
        "becomes final with the reason (judge_status skipped), counted in "
        "tracejudge_judge_expired. Bounds how stale a reflection or alert may come.",
    )
    llm_retry_after_max_s: float = Field(
        LLMConfig.retry_after_max_s,
        gt=0,
        description="Longest wait on a 429 or 503 before trying again (a longer Retry-After is "
        "cut to it); pushbacks are waited out until the deadline, never breaker failures.",
    )
    llm_breaker_failures: int = Field(
        5, ge=1, description="Consecutive failures that open the circuit breaker."
    )
    llm_breaker_cooldown_s: float = Field(
        30.0, gt=0, description="Open-circuit time before one probe call."
    )
    llm_cache_ttl_s: int = Field(
        7 * 86400, ge=1, description="TTL of cached verdicts in Redis (by input hash)."
    )
    llm_alert_fallback_rate: float = Field(
        0.5, ge=0, le=1, description="Fallback share over the window that raises an alert."
    )
    llm_alert_window_s: float = Field(
        300.0, gt=0, description="Window of the judge_unavailable alert."
    )
    llm_alert_min_requests: int = Field(
        10, ge=1, description="Judged requests in the window before the alert can fire."
    )
    llm_price_input_per_mtok: float | None = Field(
        None,
        ge=0,
        description="USD per million input tokens of TRACEJUDGE_LLM_MODEL, for each judged "
        "evaluation's cost_usd and tracejudge_judge_cost_usd_total; unset: no cost figure.",
    )
    llm_price_cached_input_per_mtok: float | None = Field(
        None,
        ge=0,
        description="USD per million cached input tokens; unset: the input price.",
    )
    llm_price_output_per_mtok: float | None = Field(
        None, ge=0, description="USD per million output tokens (set with the input price)."
    )
    llm_budget_tokens_per_minute: int = Field(
        0,
        ge=0,
        description="Judge tokens (input + output, as the server reports them) per UTC minute, "
        "shared by all judge processes via Redis; once spent, requests are not sent to the "
        "model and their evaluations say so (judge_status skipped). 0: no cap.",
    )
    llm_budget_tokens_per_day: int = Field(
        0, ge=0, description="Judge tokens per UTC day, as the per-minute cap. 0: no cap."
    )
    llm_budget_usd_per_minute: float = Field(
        0.0, ge=0, description="Judge spend per UTC minute (needs the prices). 0: no cap."
    )
    llm_budget_usd_per_day: float = Field(
        0.0, ge=0, description="Judge spend per UTC day (needs the prices). 0: no cap."
    )

    @field_validator(
        "llm_temperature",
        "llm_seed",
        "llm_max_input_chars",
        "llm_output_reserve_tokens",
        "llm_retry_max_tokens",
        mode="before",
    )
    @classmethod
    def _unset(cls, value: Any) -> Any:
        # "unset" (or empty) leaves the parameter out of the request
        if isinstance(value, str) and value.strip().lower() in ("", "unset", "none"):
            return None
        return value

    @field_validator("llm_sample_rates")
    @classmethod
    def _rates_parse(cls, value: str) -> str:
        parse_rates(value)  # a bad entry stops the start, named (not a silently full rate)
        return value

    @field_validator(
        "llm_price_input_per_mtok",
        "llm_price_cached_input_per_mtok",
        "llm_price_output_per_mtok",
        mode="before",
    )
    @classmethod
    def _price_unset(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("", "unset", "none"):
            return None
        return value

    @model_validator(mode="after")
    def _priced(self) -> Self:
        # a cost from half a price list, or a spend cap with no price, would never be right:
        # stop at start, named, rather than publish no cost or never cap
        prices = (self.llm_price_input_per_mtok, self.llm_price_output_per_mtok)
        if (prices[0] is None) != (prices[1] is None):
            given, missing = ("input", "output") if prices[1] is None else ("output", "input")
            raise SettingProblem(
                f"unset while TRACEJUDGE_LLM_PRICE_{given.upper()}_PER_MTOK is set: set both, "
                "or neither",
                f"llm_price_{missing}_per_mtok",
            )
        caps = [
            name
            for name in ("llm_budget_usd_per_minute", "llm_budget_usd_per_day")
            if getattr(self, name)
        ]
        if prices[0] is None and caps:
            raise SettingProblem(
                f"a spend cap ({' and '.join(PREFIX + name.upper() for name in caps)}) needs "
                "TRACEJUDGE_LLM_PRICE_INPUT_PER_MTOK and TRACEJUDGE_LLM_PRICE_OUTPUT_PER_MTOK, "
                "to count what the calls cost",
                *caps,
                "llm_price_input_per_mtok",
                "llm_price_output_per_mtok",
            )
        return self

    @property
    def llm_input_tokens(self) -> int:
        """Tokens the judge's input (the trace's message) may take: the context less the
        answer's reserve, the system prompt and the answer's schema."""
        reserve = self.llm_output_reserve_tokens or self.llm_max_tokens
        return input_token_budget(self.llm_context_tokens, reserve, final_judge_prompt())

    @model_validator(mode="after")
    def _fits_context(self) -> Self:
        # a context the prompt and the reserve nearly fill leaves no room for any trace: every
        # judged request would be "the trace is too large to show"
        if self.llm_input_tokens < MIN_INPUT_TOKENS:
            reserve = (
                "llm_max_tokens"
                if self.llm_output_reserve_tokens is None
                else "llm_output_reserve_tokens"
            )
            raise SettingProblem(
                f"TRACEJUDGE_LLM_CONTEXT_TOKENS ({self.llm_context_tokens}) leaves "
                f"{self.llm_input_tokens} tokens for the trace after the answer's reserve "
                f"({PREFIX}{reserve.upper()}={getattr(self, reserve)}) and the judge's "
                f"prompt; at least {MIN_INPUT_TOKENS} are needed",
                "llm_context_tokens",
                reserve,
            )
        return self


class Settings(
    BaseSettings, JudgeSettings, RuleSettings, RedisSettings, KafkaSettings, OperationSettings
):
    """Every setting, from TRACEJUDGE_* variables or a file; the groups above say what each is
    about, the variable names are the fields' (TRACEJUDGE_ + name). The groups are listed in
    reverse: pydantic takes the last base's fields first, so --help reads operation first."""

    model_config = SettingsConfigDict(env_prefix="TRACEJUDGE_", frozen=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _judge_on_when_configured(cls, values: Any) -> Any:
        # the design judges with the LLM by default; one cannot without an endpoint, so a
        # configured endpoint switches it on unless the setting says otherwise
        if isinstance(values, dict) and values.get("llm_judge_enabled") in (None, ""):
            configured = any(
                str(values.get(name) or "").strip() for name in ("llm_base_url", "llm_api_key")
            )
            values = {**values, "llm_judge_enabled": configured}
        return values

    def verdict_policy(self, calibrations: CalibrationBook | None = None) -> Policy:
        """`calibrations`: the book a calibration refresher fills (one per process, shared
        by every policy it builds); None, or the calibration off: the fixed threshold."""
        return Policy(
            warn_threshold=self.warn_threshold,
            reflection_enabled=self.reflection_enabled,
            max_reflection_rounds=self.max_reflection_rounds,
            rule_weight=self.rule_weight,
            max_iterations=self.max_iterations,
            calibrations=calibrations if self.calibration_enabled else None,
        )

    def calibration_rule(self) -> CalibrationRule:
        return CalibrationRule(
            self.calibration_target,
            self.calibration_min_ok_runs,
            self.calibration_min_failed_runs,
        )

    def loop_rules(self) -> LoopRules:
        return LoopRules(
            self.loop_repeat, self.loop_cycles, self.loop_same_failure, self.loop_no_new_result
        )

    def budget_book(self) -> BudgetBook:
        """The budgets file as read and checked at start (BudgetsError named what was wrong)."""
        return self._budget_book

    def criteria_book(self) -> CriteriaBook:
        """The teams' criteria for the LLM judge, as read and checked at start."""
        return self._criteria_book

    def check_book(self) -> CheckBook:
        """The team's checks as read and checked at start."""
        return self._check_book

    def early_stop_policy(self) -> EarlyStopPolicy:
        return EarlyStopPolicy(
            self.min_iterations, self.early_stop_consecutive, self.max_iterations
        )

    def topic(self, name: str) -> str:
        """Full name of a topic from its suffix in `names.py`."""
        return f"{self.topic_prefix}{name}"

    def masked(self) -> dict[str, Any]:
        """Settings as a dict, secrets masked (secret settings, and passwords or tokens inside
        any other value, such as a Redis URL): safe to log."""
        return {
            k: (
                "***"
                if isinstance(v, SecretStr) and v.get_secret_value()
                else mask(v)
                if isinstance(v, str)
                else v
            )
            for k, v in ((k, getattr(self, k)) for k in type(self).model_fields)
        }


def changed_settings(settings: Settings, width: int = 80) -> str:
    """The settings that differ from their defaults, masked, each value clipped to `width`:
    what a start logs. Every setting, masked, made a 3,000-character first line that hid the
    few that mattered; `tracejudge status` still shows them all."""
    parts = []
    for name, value in settings.masked().items():
        default = type(settings).model_fields[name].get_default(call_default_factory=True)
        given = getattr(settings, name)
        # a None default means "decided from other settings" (the judge is off when no
        # endpoint is configured): a false value there is that decision, not a change
        if given == default or (default is None and not given):
            continue
        shown = repr(value)
        parts.append(f"{name}={shown[: width - 1] + '…' if len(shown) > width else shown}")
    return ", ".join(parts) or "(all defaults)"


def load_settings(config_file: str | None = None) -> Settings:
    """Environment wins over the file (dotenv syntax), which wins over defaults. An unknown
    TRACEJUDGE_ variable or file key, or a bad value, is a SettingsError naming it."""
    path = config_file or os.environ.get(CONFIG_FILE_ENV)
    problems = unknown_names(k for k in os.environ if k.upper().startswith(PREFIX))
    if path:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"config file not found: {path}")
        problems += [f"{path}: {p}" for p in unknown_names(dotenv_values(path))]
    if problems:
        raise SettingsError(problems)
    renamed = _renamed(path)
    try:
        if path:
            return Settings(_env_file=path, **renamed)  # type: ignore[call-arg]
        return Settings(**renamed)
    except ValidationError as exc:
        raise SettingsError([_bad_value(error) for error in exc.errors()]) from None


def _renamed(path: str | None) -> dict[str, Any]:
    """Values given under an old name, as the new name's: the environment's before the file's,
    and none when the new name is given anywhere (the new name wins)."""

    def full(key: str) -> str:
        return key.upper() if key.upper().startswith(PREFIX) else PREFIX + key.upper()

    sources = [("environment", {k.upper(): v for k, v in os.environ.items()})]
    if path:
        sources.append((path, {full(k): v or "" for k, v in dotenv_values(path).items()}))
    values: dict[str, Any] = {}
    for old, new in RENAMED.items():
        old_name, new_name = full(old), full(new)
        for where, given in sources:
            if old_name not in given:
                continue
            sys.stderr.write(f"tracejudge: {old_name} ({where}) is deprecated: use {new_name}\n")
            if not any(new_name in g for _, g in sources):
                values.setdefault(new, given[old_name])
    return values


def unknown_names(keys: Iterable[str]) -> list[str]:
    """ "unknown setting TRACEJUDGE_WARN_TRESHOLD (did you mean TRACEJUDGE_WARN_THRESHOLD?)"."""
    known = [PREFIX + name.upper() for name in Settings.model_fields]
    problems = []
    for key in keys:
        name = key.upper() if key.upper().startswith(PREFIX) else PREFIX + key.upper()
        if name in known or name in NOT_SETTINGS or name[len(PREFIX) :].lower() in RENAMED:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(f"unknown setting {key}{hint}")
    return problems


def _bad_value(error: Any) -> str:
    """One problem in one line, beginning with the setting it is about (and its value), or
    with "settings:" when it is about several: a check across settings (a model validator)
    has no field of its own, and names its settings in a `SettingProblem`."""
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, SettingProblem):
        names, said = list(cause.names), cause.message
    else:
        loc = "_".join(str(part) for part in error.get("loc", ()))
        names, said = [loc] if loc else [], str(error.get("msg", "invalid value"))
    if len(names) != 1:
        return f"settings: {said.removeprefix('Value error, ')}"
    value = error.get("input")
    # a check across settings is given them all (a dict): its message says the values
    plain = not isinstance(cause, SettingProblem) and not isinstance(value, dict)
    shown = f"={str(value)[:80]!r}" if plain else ""
    return f"{PREFIX}{names[0].upper()}{shown}: {said}"


def describe_settings() -> str:
    """One line per setting, for --help."""
    lines = []
    for name, info in Settings.model_fields.items():
        default = (
            info.default.get_secret_value()
            if isinstance(info.default, SecretStr)
            else (info.default)
        )
        shown = repr(default) if default is not None else "unset"
        shown = "(secret)" if name.endswith("api_key") else shown
        lines.append(f"  TRACEJUDGE_{name.upper():<28} {info.description} Default: {shown}")
    return "\n".join(lines)
