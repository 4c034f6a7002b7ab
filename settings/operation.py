"""How the worker runs: its web server, data, logs, watchdog, signing and outputs."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
)

# Defaults of the judges' own settings are theirs: written there once, read here.
from tracejudge.models.errors import ConfigurationError
from tracejudge.models.signing import ControlKeys, OutcomeKeys


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
    sessions_enabled: bool = Field(
        True,
        description="Judge conversations: the requests of an agent sharing a session_key get a "
        "session verdict, revised as each closes (docs/sessions.md). false: no turn is kept. "
        "Requests without a session_key cost nothing either way.",
    )
    session_idle_s: float = Field(
        600.0,
        gt=0,
        description="A session with no request closing for this long gets its final verdict "
        "(a session_end event makes it final at once). A later request resumes it.",
    )
    session_end_grace_s: float = Field(
        30.0,
        gt=0,
        description="How long a session_end waits for the turn of the request it names (closed "
        "on another partition, or not yet) before the session is made final without it.",
    )
    session_retention_s: float = Field(
        86_400.0,
        gt=0,
        description="How long a final session is kept, so that a request resuming it is judged "
        "with the conversation before it; after that such a request starts a new session.",
    )
    session_max_turns: int = Field(
        50,
        ge=2,
        description="Turns of a session kept with their steps: past it, the oldest but the "
        "first keep only their verdicts (a session's state stays a bounded record).",
    )
    modes_enabled: bool = Field(
        True,
        description="Failure modes: each verdict that is not a clean pass names its mode, and "
        "the modes agent announces on the modes topic a mode that appears, jumps or goes quiet "
        "(docs/modes.md). false: no mode is counted or announced (evaluations still name one).",
    )
    modes_window_s: float = Field(
        600.0,
        ge=60,
        description="The sliding window a mode's runs are counted in: announced at most once "
        "per window, quiet after a whole window without a run.",
    )
    modes_history_s: float = Field(
        3600.0,
        ge=120,
        description="How far back a mode's own past goes: a mode with no run in it is new.",
    )
    modes_min_runs: int = Field(
        5, ge=1, description="Runs within the window before a mode is announced (new or jump)."
    )
    modes_jump: float = Field(
        3.0,
        gt=1,
        description="A jump: its runs in the window at least this many times what its share of "
        "the agent's verdicts before predicts (and unlikely by chance).",
    )
    modes_learn_s: float = Field(
        600.0,
        ge=0,
        description="An agent first watched announces nothing for this long: what it fails of "
        "then is its normal.",
    )
    modes_max_per_agent: int = Field(
        200, ge=10, description="Modes kept per agent: past it, the longest quiet is forgotten."
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
